"""systemtap for the kernel matrix: Debian trixie's systemtap 5.1 and, for
the kernels Debian built with gcc 14, trixie's gcc 14, each unpacked with
its own C library into a private prefix (bookworm's glibc 2.36 is too old
for them, and the machine's packages stay as they are), and each kernel's
headers (linux-headers-RELEASE, its -common and linux-kbuild packages),
all fetched through the matrix's private apt (kernelvm).

Layout, under CACHE/stap:
    root/usr/bin/stap, root/usr/bin/staprun ...     the unpacked packages
    bin/stap, bin/staprun, bin/stapio               run them with root's libc
    bin/x86_64-linux-gnu-gcc-14, bin/cc1            the same for gcc 14
    headers/usr/src/linux-headers-RELEASE           each kernel's build tree
    modules/RELEASE/readpage_HASH.ko                tracer/readpage-stap's cache

Standard library only.
"""
import glob
import os
import re
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import kernelvm  # noqa: E402

HOME = os.path.join(kernelvm.CACHE, "stap")
ROOT = os.path.join(HOME, "root")
BIN = os.path.join(HOME, "bin")
HEADERS = os.path.join(HOME, "headers")
MODULES = os.path.join(HOME, "modules")
# System.map-RELEASE from each kernel's /proc/kallsyms (Debian ships a stub
# System.map; the real one is in the -dbg package): where a kernel lacks a
# tracepoint readpage.stp uses, systemtap needs it for the kprobe instead.
SYMBOLS = os.path.join(HOME, "symbols")
READPAGE_STAP = os.path.join(kernelvm.REPO, "tracer", "readpage-stap")
# systemtap 5.1 and what of it needs newer than bookworm's; the rest of its
# libraries (nss, avahi, sqlite, curl) are bookworm's, from install-deps.
STAP_PACKAGES = ("systemtap", "systemtap-runtime", "systemtap-common", "libc6",
                 "libstdc++6", "libgcc-s1", "libdw1t64", "libelf1t64", "libdebuginfod1t64")
GCC_PACKAGES = ("gcc-14", "gcc-14-x86-64-linux-gnu", "cpp-14-x86-64-linux-gnu", "libgcc-14-dev")
LIBS = ":".join([os.path.join(ROOT, "usr/lib/x86_64-linux-gnu"),
                 "/lib/x86_64-linux-gnu", "/usr/lib/x86_64-linux-gnu"])
LOADER = os.path.join(ROOT, "usr/lib64/ld-linux-x86-64.so.2")
WRAPPERS = {
    "stap": "usr/bin/stap", "staprun": "usr/bin/staprun",
    "stapio": "usr/lib/systemtap/stapio",
    "x86_64-linux-gnu-gcc-14": "usr/bin/x86_64-linux-gnu-gcc-14",
    "cc1": "usr/libexec/gcc/x86_64-linux-gnu/14/cc1",
}


def _wrapper(name, target):
    extra = f" -B{BIN}/" if name.endswith("gcc-14") else ""   # its cc1: the wrapper
    p = os.path.join(ROOT, "usr/share/systemtap")
    return ("#!/bin/sh\n# written by tests/kernels/stapkit.py: Debian trixie's "
            f"{name} with its own C library\n"
            f"export SYSTEMTAP_RUNTIME={p}/runtime SYSTEMTAP_TAPSET={p}/tapset\n"
            f"export SYSTEMTAP_DIR=${{SYSTEMTAP_DIR:-{HOME}/systemtap-dir}}\n"
            f"export SYSTEMTAP_STAPIO={BIN}/stapio SYSTEMTAP_STAPRUN={BIN}/staprun\n"
            f"exec {LOADER} --library-path {LIBS} {ROOT}/{target}{extra} \"$@\"\n")


def _unpack(debs, into):
    os.makedirs(into, exist_ok=True)
    for deb in debs:
        subprocess.run(["dpkg-deb", "-x", deb, into], check=True)


def fetch_stap():
    """systemtap 5.1 and gcc 14, unpacked once, and their wrappers."""
    if all(os.access(os.path.join(BIN, n), os.X_OK) for n in WRAPPERS):
        return
    kernelvm.APT.update({k.suite for k in kernelvm.kernels() if not k.is_host})
    _unpack([kernelvm.APT.download(p) for p in STAP_PACKAGES + GCC_PACKAGES], ROOT)
    os.makedirs(BIN, exist_ok=True)
    for name, target in WRAPPERS.items():
        path = os.path.join(BIN, name)
        with open(path, "w") as f:
            f.write(_wrapper(name, target))
        os.chmod(path, 0o755)


def build_tree(k):
    return os.path.join(HEADERS, "usr/src", f"linux-headers-{k.release()}")


def fetch_headers(k):
    """K's headers, unpacked once, made to work where they are: Debian's
    Makefile includes the -common tree by its absolute /usr/src path,
    systemtap finds the tracepoint headers through a `source` link, and
    6.1's kernel.release says 6.1.176 where uname -r says 6.1.0-50-amd64."""
    tree = build_tree(k)
    if os.path.exists(os.path.join(tree, ".pagetrace-ready")):
        return tree
    deb = kernelvm.APT.download(f"linux-headers-{k.release()}")
    depends = subprocess.run(["dpkg-deb", "-f", deb, "Depends"], check=True,
                             capture_output=True, text=True).stdout
    more = [d.split()[0] for d in depends.split(",")
            if d.split()[0].startswith(("linux-headers-", "linux-kbuild-"))]
    _unpack([deb] + [kernelvm.APT.download(p) for p in more], HEADERS)
    common = glob.glob(os.path.join(HEADERS, "usr/src", f"linux-headers-{k.release()[:-len('-amd64')]}-common"))
    makefile = os.path.join(tree, "Makefile")
    text = open(makefile).read().replace("/usr/src/", os.path.join(HEADERS, "usr/src") + "/")
    with open(makefile, "w") as f:
        f.write(text)
    if common and not os.path.lexists(os.path.join(tree, "source")):
        os.symlink(os.path.relpath(common[0], tree), os.path.join(tree, "source"))
    with open(os.path.join(tree, "include/config/kernel.release"), "w") as f:
        f.write(k.release() + "\n")
    for kbuild in glob.glob(os.path.join(HEADERS, "usr/lib/linux-kbuild-*")):
        _wrap_newer_glibc(kbuild)
    open(os.path.join(tree, ".pagetrace-ready"), "w").close()
    return tree


def _wrap_newer_glibc(tree):
    """Kbuild's programs (fixdep, modpost, objtool) built against a newer
    glibc than the machine's: each one renamed NAME.bin and run by a
    wrapper through the private C library."""
    newer = re.compile(rb"GLIBC_2\.(3[89]|[4-9][0-9])")
    for top, _, files in os.walk(tree):
        for name in files:
            path = os.path.join(top, name)
            if os.path.islink(path) or name.endswith(".bin") or not os.access(path, os.X_OK):
                continue
            with open(path, "rb") as f:
                data = f.read()
            if not data.startswith(b"\x7fELF") or not newer.search(data):
                continue
            os.rename(path, path + ".bin")
            with open(path, "w") as f:
                f.write(f"#!/bin/sh\nexec {LOADER} --library-path {LIBS} {path}.bin \"$@\"\n")
            os.chmod(path, 0o755)


def env():
    """The environment readpage-stap runs in: the private systemtap and gcc
    14 first on PATH, its module cache."""
    return dict(os.environ, PATH=BIN + ":" + os.environ.get("PATH", "/usr/bin:/bin"),
                PAGETRACE_STAP_CACHE=MODULES)


def save_symbols(k):
    """K's symbol table as System.map-RELEASE, from its /proc/kallsyms in
    a guest booted once (as kernelvm saves its BTF)."""
    path = os.path.join(SYMBOLS, f"System.map-{k.release()}")
    if os.path.exists(path):
        return path
    os.makedirs(SYMBOLS, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="pagetrace-kallsyms-") as scratch:
        result = kernelvm.boot(k, ["cp", "/proc/kallsyms", "kallsyms"], scratch, timeout=300)
        if result.returncode != 0:
            return None
        with open(os.path.join(scratch, "kallsyms")) as f, open(path + ".tmp", "w") as out:
            out.writelines(line for line in f if len(line.split()) == 3)
    os.replace(path + ".tmp", path)
    return path


def _compile(tree, symbols):
    """readpage-stap --compile; with SYMBOLS, in a private mount namespace
    where /boot is the saved symbol tables (systemtap looks for
    /boot/System.map-RELEASE)."""
    argv = [READPAGE_STAP, "--compile", tree]
    if symbols:
        script = 'mount --bind "$1" /boot && shift && exec "$@"'
        argv = ["unshare", "--mount", "--propagation", "private", "sh", "-c", script,
                "sh", SYMBOLS, *argv]
    return subprocess.run(argv, env=env(), capture_output=True, text=True)


def compile_module(k):
    """readpage.stp's module for K, compiled on the host or found in the
    cache: (path, None), or (None, the one line that says why not). Always
    with the kernel's symbol table (saved once), so that the kprobes stand
    in for the tracepoints it lacks, and the cached module is always the
    same one."""
    fetch_stap()
    tree = fetch_headers(k)
    save_symbols(k)
    proc = _compile(tree, symbols=True)
    if proc.returncode != 0:
        return None, proc.stderr.strip().splitlines()[-1]
    return proc.stdout.strip(), None


def stap_version():
    out = subprocess.run([os.path.join(BIN, "stap"), "-V"], capture_output=True, text=True)
    m = re.search(r"version (\S+)", out.stderr + out.stdout)
    return m.group(1) if m else "?"
