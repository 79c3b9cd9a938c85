"""The kernel matrix's machinery: the kernel list, fetching Debian's kernel
packages with a private apt configuration, and booting one under qemu (TCG)
with virtme-ng to run a command in it.

Standard library only: the fetch and boot commands run with any python3.

Layout of the cache (PAGETRACE_KERNELS_CACHE, default
/var/lib/pagetrace-kernels; not under /var/cache, which virtme-ng hides
behind a tmpfs in the guest, and the guest reads the modules from here):
    apt/etc/sources.list, apt/lists, apt/archives   the private apt
    NAME/boot/vmlinuz-*, NAME/lib/modules/*          the unpacked packages
    NAME/vmlinux.btf                                 the kernel's BTF
The machine's own apt sources, lists and cache are never touched.
"""
import glob
import lzma
import os
import re
import shlex
import shutil
import struct
import subprocess
import sys
import tempfile
import time
import zlib

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
LIST = os.path.join(HERE, "list")
CACHE = os.environ.get("PAGETRACE_KERNELS_CACHE", "/var/lib/pagetrace-kernels")
MIRROR = "http://deb.debian.org/debian"
KEYRING = "/usr/share/keyrings/debian-archive-keyring.gpg"
# Modules the checks need that Debian builds as modules; loaded before the
# command so that /dev/loop-control and /dev/zram* exist.
GUEST_MODULES = ("loop", "ext4", "xfs", "zram")


class Kernel:
    cache = CACHE  # where the kernels of this architecture are unpacked

    def __init__(self, name, suite, packages):
        self.name, self.suite, self.packages = name, suite, packages

    @property
    def is_host(self):
        return self.suite == "host"

    @property
    def root(self):
        return os.path.join(self.cache, self.name)

    @property
    def btf(self):
        return os.path.join(self.root, "vmlinux.btf")

    def image(self):
        """The unpacked kernel image, or None before fetch: boot/vmlinuz-R,
        or from 7.x on, usr/lib/modules/R/vmlinuz."""
        found = glob.glob(os.path.join(self.root, "boot", "vmlinuz-*"))
        found += glob.glob(os.path.join(self.root, "usr", "lib", "modules", "*", "vmlinuz"))
        return found[0] if len(found) == 1 else None

    def release(self):
        if self.is_host:
            return os.uname().release
        image = self.image()
        if image is None:
            return None
        if os.path.basename(image) == "vmlinuz":
            return os.path.basename(os.path.dirname(image))
        return os.path.basename(image)[len("vmlinuz-"):]


def kernels(path=LIST):
    """The kernel list, in its order."""
    found = []
    with open(path) as f:
        for number, line in enumerate(f, 1):
            line = line.split("#", 1)[0].split()
            if not line:
                continue
            if len(line) < 3:
                sys.exit(f"{path}:{number}: want NAME SUITE PACKAGE...")
            packages = [] if line[2:] == ["-"] else line[2:]
            found.append(Kernel(line[0], line[1], packages))
    return found


def kernel(name):
    """NAME of tests/kernels/list, or of list-arm64 (arm64vm.py)."""
    import arm64vm
    for k in kernels() + arm64vm.kernels():
        if k.name == name:
            return k
    names = " ".join(k.name for k in kernels() + arm64vm.kernels())
    sys.exit(f"kernels: no kernel {name!r} in {LIST} (there are: {names})")


class Apt:
    """A private apt configuration in DIRECTORY for ARCH (its sources,
    lists, archives and an empty status), the machine's own untouched."""
    def __init__(self, directory, arch="amd64", sources_arch=""):
        self.dir, self.arch, self.sources_arch = directory, arch, sources_arch

    def options(self):
        apt = self.dir
        return ["-o", f"Dir::Etc::SourceList={apt}/etc/sources.list",
                "-o", "Dir::Etc::SourceParts=/nonexistent",
                "-o", f"Dir::State::Lists={apt}/lists",
                "-o", f"Dir::Cache={apt}/cache",
                "-o", f"Dir::State::status={apt}/etc/status",
                "-o", f"APT::Architecture={self.arch}",
                "-o", f"APT::Architectures={self.arch}",
                "-o", "Acquire::Languages=none",
                "-q"]

    def update(self, suites):
        """Writes the private sources.list for SUITES and updates its lists,
        when the list of suites changed since the last update."""
        apt = self.dir
        for d in ("etc", "lists/partial", "cache/archives/partial", "archives"):
            os.makedirs(os.path.join(apt, d), exist_ok=True)
        sources = "".join(f"deb [{self.sources_arch}signed-by={KEYRING}] "
                          f"{MIRROR}{'-security' * s.endswith('-security')} {s} main\n"
                          for s in sorted(suites))
        path = os.path.join(apt, "etc", "sources.list")
        old = open(path).read() if os.path.exists(path) else None
        open(os.path.join(apt, "etc", "status"), "a").close()
        if old == sources and os.listdir(os.path.join(apt, "lists")) != ["partial"]:
            return
        with open(path, "w") as f:
            f.write(sources)
        print(f"kernels: apt-get update ({self.arch}: {', '.join(sorted(suites))}), "
              f"private lists in {apt}", file=sys.stderr)
        subprocess.run(["apt-get", *self.options(), "update"], check=True,
                       stdout=subprocess.DEVNULL)

    def download(self, package, list_path=LIST):
        """The .deb of PACKAGE, downloaded once into the private archive."""
        archives = os.path.join(self.dir, "archives")
        for f in os.listdir(archives):
            if f.startswith(package + "_") and f.endswith(".deb"):
                return os.path.join(archives, f)
        print(f"kernels: downloading {package}:{self.arch}", file=sys.stderr)
        proc = subprocess.run(["apt-get", *self.options(), "download", package],
                              cwd=archives, capture_output=True, text=True)
        if proc.returncode != 0:
            sys.exit(f"kernels: apt-get download {package}: {proc.stderr.strip()} "
                     f"(is it still in its suite? update {list_path})")
        return self.download(package, list_path)


APT = Apt(os.path.join(CACHE, "apt"))


def fetch(k, btf_only=False):
    """Downloads and unpacks K's packages once, with modules.dep for the
    guest's modprobe, and saves its BTF. Returns K's vmlinuz (None for the
    host)."""
    if k.is_host:
        _save_host_btf(k)
        return None
    if getattr(k, "arch", None) == "arm64":
        import arm64vm
        return arm64vm.fetch(k, btf_only)
    if k.image() is None or not os.path.exists(os.path.join(k.root, ".unpacked")):
        APT.update({x.suite for x in kernels() if not x.is_host})
        debs = [APT.download(p) for p in k.packages]
        shutil.rmtree(k.root, ignore_errors=True)
        os.makedirs(k.root)
        for deb in debs:
            print(f"kernels: unpacking {os.path.basename(deb)}", file=sys.stderr)
            subprocess.run(["dpkg-deb", "-x", deb, k.root], check=True)
        release = k.release()
        if release is None:
            sys.exit(f"kernels: {k.name}: no single boot/vmlinuz-* in {k.packages}")
        # Debian's packages leave modules.dep to their postinst. From trixie
        # on, the modules are in usr/lib/modules (merged /usr).
        base = k.root
        if not os.path.isdir(os.path.join(base, "lib", "modules")):
            base = os.path.join(k.root, "usr")
        subprocess.run(["depmod", "-a", "-b", base, release], check=True)
        open(os.path.join(k.root, ".unpacked"), "w").close()
    if not os.path.exists(k.btf):
        save_btf(k, bzimage_payload(k.image()))
    return k.image()


def _save_host_btf(k):
    """The running kernel's BTF, copied afresh (the host may have rebooted
    into another kernel since)."""
    if os.path.exists("/sys/kernel/btf/vmlinux"):
        os.makedirs(k.root, exist_ok=True)
        shutil.copyfile("/sys/kernel/btf/vmlinux", k.btf)


def save_btf(k, image):
    """K's BTF, cut out of IMAGE, its uncompressed kernel: byte for byte
    what the booted kernel gives at /sys/kernel/btf/vmlinux (the matrix
    checks it). For x86, IMAGE is the vmlinuz's payload (xz up to Debian
    12, zstd from 13 on): no boot under TCG for it."""
    blob = find_btf(image)
    if blob is None:
        print(f"kernels: {k.name}: no BTF in {k.image()}", file=sys.stderr)
        return
    with open(k.btf + ".tmp", "wb") as f:
        f.write(blob)
    os.replace(k.btf + ".tmp", k.btf)


# The payload's first bytes (the compressor's magic), for those Debian uses.
_XZ, _ZSTD, _GZIP = b"\xfd7zXZ\x00", b"\x28\xb5\x2f\xfd", b"\x1f\x8b\x08"


def bzimage_payload(path):
    """The uncompressed kernel in the bzImage at PATH: its payload is the
    first stream with a known magic after the setup code; a stream found
    by its magic by chance fails to decompress and the next is tried."""
    with open(path, "rb") as f:
        data = f.read()
    starts = sorted((at, magic) for magic in (_XZ, _ZSTD, _GZIP)
                    for at in [data.find(magic)] if at >= 0)
    for at, magic in starts:
        try:
            if magic == _XZ:
                return lzma.LZMADecompressor().decompress(data[at:])
            if magic == _GZIP:
                return zlib.decompressobj(16 + zlib.MAX_WBITS).decompress(data[at:])
            # A zstd frame followed by the bzImage's trailer: zstd writes
            # the frame's content, then complains of the rest.
            out = subprocess.run(["zstd", "-dcq"], input=data[at:], capture_output=True).stdout
            if out:
                return out
        except (lzma.LZMAError, zlib.error):
            continue
    return b""


def find_btf(image):
    """The kernel's BTF blob in IMAGE (the .BTF section, carried in full,
    as the kernel exposes it at /sys/kernel/btf/vmlinux): the first
    well-formed BTF header (magic 0xeB9F, version 1, 24-byte header) whose
    string section ends in a NUL and whose first string is the empty one.
    None when there is none."""
    magic = b"\x9f\xeb\x01\x00\x18\x00\x00\x00"
    at = image.find(magic)
    while at >= 0:
        type_off, type_len, str_off, str_len = struct.unpack_from("<4I", image, at + 8)
        size = 24 + str_off + str_len
        body = image[at + 24:at + size]
        if (type_off == 0 and str_off >= type_len and len(body) == str_off + str_len
                and body[str_off:str_off + 1] == b"\0" and body[-1:] == b"\0"):
            return image[at:at + size]
        at = image.find(magic, at + 1)
    return None


class Result:
    """What a command run in a guest did: like subprocess.CompletedProcess,
    plus the guest's console log (the kernel's messages) for diagnosis."""
    def __init__(self, returncode, stdout, stderr, console="", booted=True, lockup=None):
        self.returncode, self.stdout, self.stderr = returncode, stdout, stderr
        self.console, self.booted, self.lockup = console, booted, lockup


# The guest runs this, in the scratch directory: the modules the checks need,
# the kernel's modprobe path (the host has no /sbin/modprobe), then the
# command with its output and status in files, since virtme-ng passes
# neither back reliably.
_GUEST_SCRIPT = """\
echo /usr/sbin/modprobe > /proc/sys/kernel/modprobe 2>/dev/null
for m in {modules}; do modprobe -q "$m" 2>/dev/null; done
cd {scratch} || exit 1
export SCRATCH={scratch}
{command} > .guest-stdout 2> .guest-stderr < /dev/null
echo $? > .guest-rc
"""


def _vng():
    """virtme-ng's vng: on PATH, or in the checkout's venv, where
    scripts/install-deps puts it."""
    for found in (shutil.which("vng"), os.path.join(REPO, ".venv", "bin", "vng")):
        if found and os.access(found, os.X_OK):
            return found
    sys.exit("kernels: no vng (virtme-ng): run scripts/install-deps")


def boot(k, command, scratch, timeout=900, memory="2G", cpus=2, append=(),
         started=None, start_timeout=300):
    """Runs COMMAND (argv list) in kernel K with SCRATCH (a host directory)
    writable and as the working directory; the rest of the host's root is
    read-only (virtme-ng gives the guest in-memory overlays). On the host
    kernel, runs it directly. Returns a Result; returncode 125 when the guest
    never ran the command to its end (no boot, a panic, the timeout). When
    STARTED (a path the command creates early) does not exist START_TIMEOUT
    seconds after the boot began, the guest is stopped as not booted, and
    the Result's `booted` is false: qemu's TCG hangs in a boot now and then."""
    scratch = os.path.abspath(scratch)
    os.makedirs(scratch, exist_ok=True)
    if k.is_host:
        env = dict(os.environ, SCRATCH=scratch)
        try:
            proc = subprocess.run(command, cwd=scratch, capture_output=True,
                                  text=True, errors="replace", timeout=timeout,
                                  env=env, stdin=subprocess.DEVNULL)
        except subprocess.TimeoutExpired:
            return Result(125, "", f"kernels: host: timed out after {timeout} s\n")
        return Result(proc.returncode, proc.stdout, proc.stderr)
    image = k.image() or fetch(k)
    for f in (".guest-stdout", ".guest-stderr", ".guest-rc", ".guest-run"):
        if os.path.exists(os.path.join(scratch, f)):
            os.unlink(os.path.join(scratch, f))
    script = os.path.join(scratch, ".guest-run")
    with open(script, "w") as f:
        f.write(_GUEST_SCRIPT.format(modules=" ".join(GUEST_MODULES),
                                     scratch=shlex.quote(scratch),
                                     command=shlex.join(command)))
    env = dict(os.environ)
    if getattr(k, "arch", None) == "arm64":
        import arm64vm
        argv = arm64vm.argv(k, scratch, memory=memory, cpus=cpus, append=append)
    else:
        env["PATH"] = os.path.dirname(_vng()) + ":" + env.get("PATH", "/usr/bin:/bin")
        argv = [_vng(), "--verbose", "--run", image, "--disable-kvm",
                "--memory", memory, "--cpus", str(cpus), "--rwdir", scratch,
                "--cwd", scratch]
        for a in append:
            argv += ["--append", a]
        argv += ["--exec", f"sh {shlex.quote(script)}"]
    console = os.path.join(scratch, ".guest-console")
    with open(console, "w") as out:
        proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=out,
                                stderr=subprocess.STDOUT, env=env,
                                start_new_session=True)
        try:
            booted, lockup = _wait(proc, timeout, started, start_timeout, console)
        finally:
            # The timeout, or this process interrupted: the guest goes too.
            if proc.poll() is None:
                os.killpg(proc.pid, 9)
                proc.wait()
    log = open(console, errors="replace").read()

    def read(name):
        path = os.path.join(scratch, name)
        return open(path, errors="replace").read() if os.path.exists(path) else ""
    rc = read(".guest-rc").strip()
    tail = "\n".join(log.splitlines()[-20:])
    if not booted:
        return Result(125, read(".guest-stdout"),
                      read(".guest-stderr") + f"kernels: {k.name}: the command had not "
                      f"started {start_timeout} s after the boot began; its console's last "
                      f"lines:\n{tail}\n", log, booted=False)
    if lockup:
        return Result(125, read(".guest-stdout"),
                      read(".guest-stderr") + f"kernels: {k.name}: the guest's kernel "
                      f"failed ({lockup}); stopped then; its console's last "
                      f"lines:\n{tail}\n", log, lockup=lockup)
    if not rc.isdigit():
        return Result(125, read(".guest-stdout"),
                      read(".guest-stderr") + f"kernels: {k.name}: the guest did not "
                      f"finish the command (timeout {timeout} s, panic or no boot); "
                      f"its console's last lines:\n{tail}\n", log)
    return Result(int(rc), read(".guest-stdout"), read(".guest-stderr"), log)


# A CPU the guest's kernel reports stuck this long does not come back in
# the guest's timeout (under TCG: seen in a loop at a function's patched
# entry while BPF trampolines attached and detached). A kernel oops leaves
# the guest's checks waiting (seen on 6.1 under TCG: a call to address 0
# from do_fault() while kprobes attached and detached).
LOCKUP_S = 120
_LOCKUP = re.compile(r"soft lockup - (CPU#\d+ stuck for (\d+)s!.*)")
_BUG = re.compile(r"\] (BUG: .*)")
_OOPS = re.compile(r"\] Oops: ")


def _rip(lines):
    """Where an oops or lockup report's first lines say the CPU was, and
    for a jump to nowhere (RIP 0x0) the first frame of its call trace."""
    rip = next((l.split("RIP: 0010:")[1].strip() for l in lines if "RIP: 0010:" in l), "?")
    if rip == "0x0" and any("Call Trace:" in l for l in lines):
        trace = lines[next(i for i, l in enumerate(lines) if "Call Trace:" in l) + 1:]
        frame = next((l.split("]", 1)[1].strip() for l in trace
                      if "]" in l and "+0x" in l and " ? " not in l), None)
        rip += f" called from {frame}" if frame else ""
    return rip


def _failure(lines):
    """Where the console's LINES report the kernel failing: (first line,
    report line, seconds stuck) for its last soft lockup of LOCKUP_S
    seconds or more, else for its first oops (its first line the BUG line
    just before, if any); None when neither."""
    for i in range(len(lines) - 1, -1, -1):
        m = _LOCKUP.search(lines[i])
        if m and int(m.group(2)) >= LOCKUP_S:
            return i, i, int(m.group(2))
    for i, line in enumerate(lines):
        if _OOPS.search(line):
            bug = [j for j in range(max(0, i - 5), i) if _BUG.search(lines[j])]
            return (bug[0] if bug else i), i, 0
    return None


def _lockup(console):
    """The console's last soft-lockup report of LOCKUP_S seconds or more,
    or its first oops, with the instruction it was at; or None."""
    try:
        lines = open(console, errors="replace").read().splitlines()
    except OSError:
        return None
    found = _failure(lines)
    if found is None:
        return None
    first, at, stuck = found
    if stuck:
        return f"{_LOCKUP.search(lines[at]).group(1)} at {_rip(lines[at:at + 40])}"
    bug = _BUG.search(lines[first]) if first != at else None
    return f"Oops, {bug.group(1) if bug else 'an oops'}, at {_rip(lines[at:at + 40])}"


_STAMP = re.compile(r"^\[\s*(\d+\.\d+)\]")


def failed_since(log):
    """The guest's uptime (the printk time, seconds) when its kernel began
    to fail as _lockup() reports it, read from the console's LOG (a
    Result's console): an oops's time, or a soft lockup's report time less
    the seconds it says it was stuck; None when there is neither."""
    lines = log.splitlines()
    found = _failure(lines)
    stamp = found and _STAMP.search(lines[found[0]])
    return float(stamp.group(1)) - found[2] if stamp else None


def failure_report(log, before=5, after=45):
    """The console LOG's lines from where _lockup()'s failure begins: what
    a kernel failure's diagnosis starts from; "" if none."""
    lines = log.splitlines()
    found = _failure(lines)
    return "" if found is None else "\n".join(lines[max(0, found[0] - before):found[0] + after])


def _wait(proc, timeout, started, start_timeout, console):
    """Waits for PROC to end, TIMEOUT seconds at most. Returns (booted,
    lockup): booted false when STARTED did not appear within START_TIMEOUT
    seconds; lockup the CONSOLE's report when the guest's kernel says a CPU
    has been stuck LOCKUP_S seconds. Either way the guest is left running,
    for the caller to stop."""
    deadline = time.monotonic() + timeout
    start_deadline = time.monotonic() + start_timeout
    checked = 0
    while time.monotonic() < deadline:
        try:
            proc.wait(timeout=2)
            return True, None
        except subprocess.TimeoutExpired:
            pass
        if started and not os.path.exists(started) and time.monotonic() > start_deadline:
            return False, None
        if time.monotonic() - checked > 20:
            checked = time.monotonic()
            lockup = _lockup(console)
            if lockup:
                return True, lockup
    return True, None


def describe():
    """Lines describing each kernel: name, release, where its files are."""
    for k in kernels():
        where = "(this machine)" if k.is_host else (k.image() or "(not fetched)")
        btf = k.btf if os.path.exists(k.btf) else "(no BTF saved yet)"
        yield f"{k.name:6} {k.suite:17} {k.release() or '?':24} {where}  {btf}"
