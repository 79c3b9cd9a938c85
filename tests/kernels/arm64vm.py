"""The kernel matrix's arm64 guests: Debian's arm64 kernels booted under
qemu-system-aarch64 (-M virt, TCG) on a small arm64 root made here from
Debian's arm64 packages, since an arm64 guest cannot run the host's x86-64
root as the x86-64 guests do (virtme-ng).

Standard library only, like kernelvm.py, whose interface it keeps:
kernelvm.kernel("arm64-6.1") is one of these, and kernelvm.boot() runs a
command in it with the same scratch-directory protocol.

What the guest sees:
    /                  an initramfs: Debian's python3, util-linux, e2fsprogs,
                       xfsprogs, kmod, coreutils, findutils and busybox (for
                       the init script), unpacked from their arm64 packages
                       (no maintainer scripts run: none of them needs one),
                       plus the kernel's modules the checks and 9p need
    REPO (read-only)   this checkout, over 9p at the same path, for
                       tests/ and analysis/ (the Python the checks run)
    TOOLS (read-only)  the arm64 tools, over 9p at the same path
    SCRATCH            the working directory, over 9p, writable
Layout of the cache, beside kernelvm's:
    arm64/apt/...               the private apt (APT::Architecture=arm64)
    arm64/root-SUITE/           the unpacked root, and root-SUITE.cpio
    arm64/NAME/boot/vmlinuz-*   the unpacked kernel package
    arm64/NAME/vmlinux.btf      its BTF, cut out of the image
    arm64/NAME/initrd.cpio      the root, the modules, the init script
"""
import glob
import gzip
import os
import shlex
import shutil
import subprocess
import sys

import kernelvm

HERE = os.path.dirname(os.path.abspath(__file__))
LIST = os.path.join(HERE, "list-arm64")
CACHE = os.path.join(kernelvm.CACHE, "arm64")
ROOT_SUITE = "bookworm"
# The root's packages (their dependencies come with them). busybox-static
# gives the init script its shell, mount, poweroff; the rest are what
# guest_checks.py and tests/cachefuzz.py run.
ROOT_PACKAGES = ("python3", "dash", "coreutils", "findutils", "util-linux", "mount",
                 "e2fsprogs", "xfsprogs", "kmod", "busybox-static", "grep", "sed")
# Modules beyond kernelvm's that the init script needs for the 9p shares
# (Debian builds virtio_pci as a module on arm64).
SHARE_MODULES = ("virtio_pci", "9p", "9pnet_virtio")
QEMU = "qemu-system-aarch64"


class Kernel(kernelvm.Kernel):
    arch = "arm64"
    cache = CACHE

    @property
    def initrd(self):
        return os.path.join(self.root, "initrd.cpio")


def kernels(path=LIST):
    return [Kernel(k.name, k.suite, k.packages) for k in kernelvm.kernels(path)]


APT = kernelvm.Apt(os.path.join(CACHE, "apt"), "arm64", "arch=arm64 ")


def _apt_update():
    APT.update({k.suite for k in kernels()} | {ROOT_SUITE})


def fetch(k, btf_only=False):
    """K's package unpacked once, with modules.dep, its BTF cut out of the
    image, and (unless BTF_ONLY) its initramfs. Returns the vmlinuz."""
    if k.image() is None or not os.path.exists(os.path.join(k.root, ".unpacked")):
        _apt_update()
        debs = [APT.download(p, LIST) for p in k.packages]
        shutil.rmtree(k.root, ignore_errors=True)
        os.makedirs(k.root)
        for deb in debs:
            print(f"kernels: unpacking {os.path.basename(deb)}", file=sys.stderr)
            subprocess.run(["dpkg-deb", "-x", deb, k.root], check=True)
        if k.release() is None:
            sys.exit(f"kernels: {k.name}: no single boot/vmlinuz-* in {k.packages}")
        subprocess.run(["depmod", "-a", "-b", _modules_base(k), k.release()], check=True)
        open(os.path.join(k.root, ".unpacked"), "w").close()
    if not os.path.exists(k.btf):
        kernelvm.save_btf(k, kernel_image(k))
    if btf_only:
        return k.image()
    if not os.path.exists(k.initrd) or os.path.getmtime(k.initrd) < os.path.getmtime(__file__):
        _make_initrd(k)
    return k.image()


def _modules_base(k):
    """Where lib/modules is: under usr/ from trixie on (merged /usr)."""
    return k.root if os.path.isdir(os.path.join(k.root, "lib", "modules")) else \
        os.path.join(k.root, "usr")


def kernel_image(k):
    """The uncompressed arm64 Image: Debian's vmlinuz is it, gzipped."""
    with open(k.image(), "rb") as f:
        data = f.read()
    return gzip.decompress(data) if data[:2] == b"\x1f\x8b" else data


def root_dir():
    return os.path.join(CACHE, f"root-{ROOT_SUITE}")


def make_root():
    """The arm64 root, unpacked once from ROOT_PACKAGES and their
    dependencies (apt resolves them against an empty status: the closure)."""
    root = root_dir()
    if os.path.exists(os.path.join(root, ".unpacked")):
        return root
    _apt_update()
    archives = os.path.join(CACHE, "apt", "cache", "archives")
    subprocess.run(["apt-get", *APT.options(), "-t", ROOT_SUITE, "install", "--download-only",
                    "-y", "--no-install-recommends", *ROOT_PACKAGES],
                   check=True, stdout=subprocess.DEVNULL)
    shutil.rmtree(root, ignore_errors=True)
    os.makedirs(root)
    for deb in sorted(glob.glob(os.path.join(archives, "*_arm64.deb"))
                      + glob.glob(os.path.join(archives, "*_all.deb"))):
        subprocess.run(["dpkg-deb", "-x", deb, root], check=True)
    # What maintainer scripts and the merged-/usr layout would have made.
    for d in ("bin", "sbin", "lib"):
        if not os.path.lexists(os.path.join(root, d)):
            os.symlink(f"usr/{d}", os.path.join(root, d))
    os.symlink("/bin/dash", os.path.join(root, "usr", "bin", "sh"))
    for d in ("proc", "sys", "dev", "tmp", "run", "mnt", "etc"):
        os.makedirs(os.path.join(root, d), exist_ok=True)
    with open(os.path.join(root, "etc", "passwd"), "w") as f:
        f.write("root:x:0:0:root:/root:/bin/sh\n")
    with open(os.path.join(root, "etc", "group"), "w") as f:
        f.write("root:x:0:\n")
    open(os.path.join(root, "etc", "fstab"), "w").close()
    open(os.path.join(root, ".unpacked"), "w").close()
    return root


# The guest's /init: the virtual file systems, the modules, the 9p shares
# (the kernel passes pagetrace_shares=TAG:PATH:MODE,... from its command
# line to init's environment), then the scratch share's .guest-run, which
# writes its status and output there itself (kernelvm's protocol); then the
# shares are unmounted and the guest powers off.
INIT = """\
#!/bin/busybox sh
/bin/busybox mount -t proc proc /proc
/bin/busybox mount -t sysfs sysfs /sys
/bin/busybox mount -t devtmpfs devtmpfs /dev
/bin/busybox mount -t tmpfs tmpfs /tmp
/bin/busybox mount -t tracefs tracefs /sys/kernel/tracing 2>/dev/null
/bin/busybox mount -t debugfs debugfs /sys/kernel/debug 2>/dev/null
/bin/busybox mount -t bpf bpf /sys/fs/bpf 2>/dev/null
/bin/busybox mount -t cgroup2 cgroup2 /sys/fs/cgroup 2>/dev/null
export PATH=/usr/sbin:/usr/bin:/sbin:/bin HOME=/root
for m in {modules}; do modprobe -q "$m"; done
run=
for share in $(echo "$pagetrace_shares" | /bin/busybox tr , ' '); do
    tag=${{share%%:*}}; rest=${{share#*:}}; path=${{rest%:*}}; mode=${{rest##*:}}
    mkdir -p "$path"
    /bin/busybox mount -t 9p -o trans=virtio,version=9p2000.L,msize=512000,cache=none,"$mode" \
        "$tag" "$path" || echo "init: 9p $tag at $path did not mount" > /dev/console
    [ "$tag" = scratch ] && run=$path/.guest-run
done
echo "pagetrace-init: running $run" > /dev/console
[ -n "$run" ] && sh "$run"
/bin/busybox sync
for share in $(echo "$pagetrace_shares" | /bin/busybox tr , ' '); do
    rest=${{share#*:}}; /bin/busybox umount "${{rest%:*}}"
done
echo o > /proc/sysrq-trigger
/bin/busybox sleep 60
"""


def _modules(k, names):
    """The module files NAMES need, dependencies first (modprobe's own
    resolution, against the unpacked tree), relative to the modules base."""
    base = _modules_base(k)
    found = []
    for name in names:
        proc = subprocess.run(["modprobe", "-d", base, "-S", k.release(), "--show-depends", name],
                              capture_output=True, text=True)
        for line in proc.stdout.splitlines():
            if line.startswith("insmod "):
                path = os.path.relpath(line.split()[1], base)
                if path not in found:
                    found.append(path)
    return found


def _cpio(src, out, append=False):
    """SRC's tree as a newc cpio archive (the kernel unpacks concatenated
    ones in turn)."""
    files = subprocess.run(["find", ".", "-mindepth", "1"], cwd=src, check=True,
                           capture_output=True).stdout
    with open(out, "ab" if append else "wb") as f:
        subprocess.run(["cpio", "--quiet", "-o", "-H", "newc", "--owner", "0:0"], cwd=src,
                       input=files, stdout=f, check=True)


def _make_initrd(k):
    """K's initramfs: the root's archive, then one of K's modules and the
    init script."""
    root = make_root()
    root_cpio = root + ".cpio"
    if not os.path.exists(root_cpio):
        _cpio(root, root_cpio + ".tmp")
        os.replace(root_cpio + ".tmp", root_cpio)
    extra = os.path.join(k.root, "initrd-extra")
    shutil.rmtree(extra, ignore_errors=True)
    base = _modules_base(k)
    release_dir = os.path.join("lib", "modules", k.release())
    for path in _modules(k, (*kernelvm.GUEST_MODULES, *SHARE_MODULES)):
        os.makedirs(os.path.join(extra, os.path.dirname(path)), exist_ok=True)
        shutil.copyfile(os.path.join(base, path), os.path.join(extra, path))
    for f in glob.glob(os.path.join(base, release_dir, "modules.*")):
        shutil.copyfile(f, os.path.join(extra, release_dir, os.path.basename(f)))
    with open(os.path.join(extra, "init"), "w") as f:
        f.write(INIT.format(modules=" ".join((*SHARE_MODULES, *kernelvm.GUEST_MODULES))))
    os.chmod(os.path.join(extra, "init"), 0o755)
    shutil.copyfile(root_cpio, k.initrd + ".tmp")
    _cpio(extra, k.initrd + ".tmp", append=True)
    os.replace(k.initrd + ".tmp", k.initrd)
    shutil.rmtree(extra)


def tools_dir():
    """The arm64 tools the guests run: PAGETRACE_ARM64_TOOLS, or the tree's
    static cross build (make static ARCH=arm64: build/static-aarch64)."""
    return os.path.abspath(os.environ.get("PAGETRACE_ARM64_TOOLS",
                                          os.path.join(kernelvm.REPO, "build", "static-aarch64")))


def argv(k, scratch, memory="2G", cpus=2, append=()):
    """qemu's argv to run SCRATCH's .guest-run in K: the checkout and the
    tools shared read-only, SCRATCH writable, each at its host path."""
    fetch(k)
    shares = [("repo", kernelvm.REPO, "ro")]
    tools = tools_dir()
    if not tools.startswith(kernelvm.REPO + "/") and os.path.isdir(tools):
        shares.append(("tools", tools, "ro"))
    shares.append(("scratch", scratch, "rw"))
    for _, path, _ in shares:
        if any(c in path for c in " ,:") or not path.isprintable():
            sys.exit(f"kernels: {path}: a space, comma or colon: cannot be shared with an arm64 guest")
    line = ["console=ttyAMA0", "panic=-1", "rdinit=/init", *append,
            "pagetrace_shares=" + ",".join(":".join(s) for s in shares)]
    # The Cortex-A57 has no 16 KiB translation granule: the -16k flavour
    # does not get to its first console line there.
    cpu = "max,pauth-impdef=on" if k.release().endswith("-16k") else "cortex-a57"
    argv = [QEMU, "-M", "virt", "-cpu", cpu, "-smp", str(cpus), "-m", memory,
            "-nographic", "-no-reboot", "-kernel", k.image(), "-initrd", k.initrd,
            "-append", " ".join(line)]
    for tag, path, mode in shares:
        argv += ["-fsdev", f"local,id={tag},path={path},security_model=none"
                 + (",readonly=on" if mode == "ro" else ""),
                 "-device", f"virtio-9p-pci,fsdev={tag},mount_tag={tag}"]
    return argv
