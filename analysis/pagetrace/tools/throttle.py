"""Slow storage emulated with the kernel's blk-throttle: limits, named
device profiles, the whole disk under a file, and the throttled cgroup.

The same rules as replay's --throttle (replay/throttle.c); docs/replay.md,
"Slow storage", says where each profile's numbers come from and what a
throttle cannot emulate. Standard library only: startup-bench runs it under
sudo with the system Python.

    limits = throttle.parse_limits("riops=150,rbps=150000000")
    disks = throttle.disks_of(paths)           # ThrottleError if one cannot be
    with throttle.Cgroup(limits, disks, "startup-bench") as cgroup:
        with cgroup.spawning():                # children start inside it
            proc = subprocess.Popen(...)

A process joins a cgroup for good at fork, so `spawning` moves this
process in only while it starts children, and back out at once: its own
cache preparation is never throttled. The cgroup is removed when the
`with` ends, also on an exception, SIGINT, SIGTERM or SIGHUP (turned into
KeyboardInterrupt while the cgroup exists); processes still in it then
are killed first.
"""
import contextlib
import errno
import os
import signal
import time
from collections import namedtuple

Limits = namedtuple("Limits", "riops rbps profile")
Profile = namedtuple("Profile", "riops rbps source")

# At the package's top, beside VERSION: replay's Makefile reads it too.
PROFILES_TABLE = os.path.join(
    os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
    "device-profiles.tsv")


def read_profiles(path=PROFILES_TABLE, kind="blk-throttle"):
    """name -> Profile, the rows of KIND in the one table of device profiles
    (replay compiles the same file in); docs/replay.md, "Slow storage"."""
    profiles, columns = {}, None
    with open(path, encoding="utf-8") as table:
        for line in table:
            if line.startswith("#") or not line.strip():
                continue
            cells = line.rstrip("\n").split("\t")
            if columns is None:
                columns = cells
                continue
            row = dict(zip(columns, cells))
            if row["kind"] == kind:
                profiles[row["name"]] = Profile(int(row["riops"]),
                                                int(row["rbps"]), row["source"])
    return profiles


PROFILES = read_profiles()

MOUNTINFO = "/proc/self/mountinfo"
_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


class ThrottleError(Exception):
    """`what: why`, said in one line by the caller, which then exits."""


def _count(text):
    if not text.isdigit():
        raise ValueError
    return int(text)


def _size(text):
    """Bytes with an optional K/M/G suffix (powers of 1024), as lib/size.c."""
    shift = {"k": 10, "m": 20, "g": 30}.get(text[-1:].lower(), 0)
    return _count(text[:-1] if shift else text) << shift


def parse_limits(text):
    """`riops=N[,rbps=SIZE]` as Limits; ThrottleError saying what is wrong."""
    values = {}
    for item in text.split(","):
        key, eq, value = item.partition("=")
        if not eq:
            raise ThrottleError(f"--throttle: '{text}': expected KEY=VALUE "
                                "items: riops=N[,rbps=SIZE]")
        if key not in ("riops", "rbps"):
            raise ThrottleError(f"--throttle: '{text}': unknown key '{key}': "
                                "the keys are riops and rbps")
        try:
            values[key] = _count(value) if key == "riops" else _size(value)
        except ValueError:
            values[key] = 0
        if values[key] <= 0:
            raise ThrottleError(
                f"--throttle: '{text}': {key} must be "
                + ("a whole number of reads per second, at least 1"
                   if key == "riops" else "a positive size in bytes per "
                   "second (K, M, G suffixes)"))
    if "riops" not in values:
        raise ThrottleError(f"--throttle: '{text}': riops=N is required "
                            "(reads per second, at least 1)")
    return Limits(values["riops"], values.get("rbps"), None)


def profile_limits(name):
    if name not in PROFILES:
        raise ThrottleError(f"--device-profile: '{name}': no such profile "
                            f"(there are {', '.join(PROFILES)})")
    p = PROFILES[name]
    return Limits(p.riops, p.rbps, name)


def label(limits):
    """The startup-bench CSV's throttle column: the profile's name, or
    `riops=N rbps=B` (no comma, for the CSV); None without a throttle."""
    if not limits:
        return None
    return limits.profile or f"riops={limits.riops}" + (
        f" rbps={limits.rbps}" if limits.rbps else "")


def describe(limits):
    """`cloud-3000 (riops=3000,rbps=131072000)` or `riops=150`."""
    text = f"riops={limits.riops}" + (f",rbps={limits.rbps}" if limits.rbps else "")
    return f"{limits.profile} ({text})" if limits.profile else text


# ---------------------------------------------------------------------------
# Mounts and disks.

def _unescape(text):
    out, i = bytearray(), 0
    raw = text.encode("utf-8", "surrogateescape")
    while i < len(raw):
        if raw[i:i + 1] == b"\\" and len(raw) >= i + 4 and \
                all(48 <= c <= 55 for c in raw[i + 1:i + 4]):
            out.append(int(raw[i + 1:i + 4], 8) & 0xFF)
            i += 4
        else:
            out.append(raw[i])
            i += 1
    return out.decode("utf-8", "surrogateescape")


Mount = namedtuple("Mount", "dev root point fstype source options")


def mounts(mountinfo=MOUNTINFO):
    """The mounts of /proc/self/mountinfo (proc(5)), unescaped."""
    result = []
    with open(mountinfo, encoding="utf-8", errors="surrogateescape") as f:
        for line in f:
            head, sep, tail = line.rstrip("\n").partition(" - ")
            fields, rest = head.split(" "), tail.split(" ")
            if not sep or len(fields) < 6 or len(rest) < 3:
                continue
            major, _, minor = fields[2].partition(":")
            result.append(Mount(os.makedev(int(major), int(minor)),
                                _unescape(fields[3]), _unescape(fields[4]),
                                rest[0], _unescape(rest[1]), rest[2]))
    return result


def _anonymous_source(dev, path, mountinfo):
    """The block device of a filesystem on an anonymous device (major 0),
    when its mount source is one (btrfs); ThrottleError otherwise."""
    found = [m for m in mounts(mountinfo) if m.dev == dev]
    if not found:
        raise ThrottleError(f"{path}: cannot throttle: its filesystem (device "
                            f"{os.major(dev)}:{os.minor(dev)}) is not in {mountinfo}")
    m = found[0]
    if m.source.startswith("/"):
        try:
            st = os.stat(m.source)
            if (st.st_mode & 0o170000) == 0o060000:
                return st.st_rdev
        except OSError:
            pass
    if m.fstype == "overlay":
        raise ThrottleError(f"{path}: cannot throttle: it is on an overlay "
                            "filesystem, whose reads go to its layers' "
                            "filesystems; blk-throttle limits one block "
                            "device, and which layer holds a file is not "
                            "resolved")
    raise ThrottleError(f"{path}: cannot throttle: it is on {m.fstype} "
                        f"({m.source}), which has no block device for "
                        "blk-throttle to limit")


def whole_disk(dev, path="", sysfs="/sys"):
    """The disk blk-throttle accepts for block device `dev`: itself, or for
    a partition its disk (the kernel's blkcg_conf_open_bdev() refuses
    partitions with ENODEV)."""
    where = f"{sysfs}/dev/block/{os.major(dev)}:{os.minor(dev)}"
    if not os.path.exists(where):
        raise ThrottleError(f"{path}: cannot throttle: device "
                            f"{os.major(dev)}:{os.minor(dev)} is not a block "
                            f"device (no {where})")
    if not os.path.exists(f"{where}/partition"):
        return dev
    parent = os.path.join(os.path.realpath(where), "..", "dev")
    with open(parent) as f:
        major, _, minor = f.read().strip().partition(":")
    return os.makedev(int(major), int(minor))


def disk_of(path, mountinfo=MOUNTINFO, sysfs="/sys"):
    dev = os.stat(path).st_dev
    if os.major(dev) == 0:
        dev = _anonymous_source(dev, path, mountinfo)
    return whole_disk(dev, path, sysfs)


def disks_of(paths, mountinfo=MOUNTINFO, sysfs="/sys"):
    """The distinct disks under `paths`, in order of first appearance."""
    disks = {}
    for path in paths:
        disks.setdefault(disk_of(path, mountinfo, sysfs), None)
    return list(disks)


def dev_text(dev):
    return f"{os.major(dev)}:{os.minor(dev)}"


# ---------------------------------------------------------------------------
# The hierarchy and the cgroup.

Hierarchy = namedtuple("Hierarchy", "version point root")


def _words(text):
    return set(text.replace(",", " ").split())


def _read(path):
    with open(path) as f:
        return f.read()


def find_hierarchy(mountinfo=MOUNTINFO):
    """cgroup v2 when it offers the io controller, else the v1 blkio
    hierarchy with blkio.throttle files; ThrottleError saying why neither."""
    all_mounts = mounts(mountinfo)
    v2 = next((m for m in all_mounts if m.fstype == "cgroup2"), None)
    v1 = next((m for m in all_mounts if m.fstype == "cgroup"
               and "blkio" in _words(m.options)), None)
    if v2:
        try:
            if "io" in _words(_read(f"{v2.point}/cgroup.controllers")):
                return Hierarchy(2, v2.point, v2.root)
        except OSError:
            pass
    if v1 and os.path.exists(f"{v1.point}/blkio.throttle.read_iops_device"):
        return Hierarchy(1, v1.point, v1.root)
    if v1:
        raise ThrottleError(f"--throttle: the kernel has no blk-throttle: "
                            f"{v1.point} has no blkio.throttle.read_iops_device "
                            "(CONFIG_BLK_DEV_THROTTLING)")
    if v2:
        raise ThrottleError(f"--throttle: no blk-throttle here: cgroup v2 "
                            f"({v2.point}) does not offer the io controller "
                            "and no cgroup v1 blkio hierarchy is mounted")
    raise ThrottleError("--throttle: no blk-throttle here: neither cgroup v2 "
                        "nor a cgroup v1 blkio hierarchy is mounted")


def _home(hierarchy, proc_cgroup="/proc/self/cgroup"):
    """cgroup.procs of the cgroup this process is in."""
    for line in _read(proc_cgroup).splitlines():
        _, controllers, path = line.split(":", 2)
        if (controllers == "" if hierarchy.version == 2
                else "blkio" in controllers.split(",")):
            if hierarchy.root != "/" and path.startswith(hierarchy.root):
                path = path[len(hierarchy.root):] or "/"
            return os.path.join(hierarchy.point, path.lstrip("/"), "cgroup.procs")
    raise ThrottleError("--throttle: cannot find this process's cgroup in "
                        f"{proc_cgroup}")


def remove_stale(point):
    """A run killed by SIGKILL (or the OOM killer) could not remove its
    cgroup: pagetrace-TOOL.PID directories of processes that are gone are
    removed. rmdir only removes an empty cgroup; one in use stays."""
    try:
        names = os.listdir(point)
    except OSError:
        return
    for name in names:
        pid = name.rpartition(".")[2]
        if not name.startswith("pagetrace-") or not pid.isdigit():
            continue
        try:
            os.kill(int(pid), 0)
        except ProcessLookupError:
            with contextlib.suppress(OSError):
                os.rmdir(os.path.join(point, name))
        except PermissionError:
            pass


def _write(path, text):
    fd = os.open(path, os.O_WRONLY | os.O_CLOEXEC)
    try:
        os.write(fd, text.encode())
    finally:
        os.close(fd)


class Cgroup:
    """The throttled cgroup of one session (see the module's docstring)."""

    def __init__(self, limits, disks, tool, mountinfo=MOUNTINFO):
        self.limits, self.disks, self.tool = limits, list(disks), tool
        self.mountinfo = mountinfo
        self.hierarchy = self.dir = self.home = None
        self.enabled_io = False
        self.old_handlers = {}

    @property
    def version(self):
        return f"v{self.hierarchy.version}" if self.hierarchy else None

    def __enter__(self):
        self.hierarchy = find_hierarchy(self.mountinfo)
        self.home = _home(self.hierarchy)
        remove_stale(self.hierarchy.point)
        for sig in _SIGNALS:
            self.old_handlers[sig] = signal.signal(sig, self._interrupt)
        try:
            self._create()
        except BaseException:
            self.remove()
            raise
        return self

    def __exit__(self, *exc):
        self.remove()
        return False

    @staticmethod
    def _interrupt(signum, frame):
        raise KeyboardInterrupt(f"signal {signum}")

    def _create(self):
        point = self.hierarchy.point
        if self.hierarchy.version == 2:
            control = f"{point}/cgroup.subtree_control"
            if "io" not in _words(_read(control)):
                try:
                    _write(control, "+io")
                except OSError as exc:
                    raise ThrottleError(f"{control}: cannot enable the io "
                                        f"controller: {exc.strerror}") from None
                self.enabled_io = True
        path = f"{point}/pagetrace-{self.tool}.{os.getpid()}"
        try:
            os.mkdir(path)
        except OSError as exc:
            root = " (needs root)" if exc.errno in (errno.EACCES, errno.EPERM,
                                                    errno.EROFS) else ""
            raise ThrottleError(f"--throttle: cannot create the cgroup {path}: "
                                f"{exc.strerror}{root}") from None
        self.dir = path
        if self.hierarchy.version == 2 and not os.path.exists(f"{path}/io.max"):
            raise ThrottleError(f"--throttle: the kernel has no blk-throttle: the "
                                f"io controller is on, but {path}/io.max is "
                                "missing (CONFIG_BLK_DEV_THROTTLING)")
        for disk in self.disks:
            self._limit(disk)

    def _limit(self, disk):
        riops, rbps, d = self.limits.riops, self.limits.rbps, dev_text(disk)
        if self.hierarchy.version == 2:
            writes = [("io.max", f"{d} riops={riops} rbps={rbps or 'max'}")]
        else:
            writes = [("blkio.throttle.read_iops_device", f"{d} {riops}")]
            if rbps:
                writes.append(("blkio.throttle.read_bps_device", f"{d} {rbps}"))
        for name, text in writes:
            try:
                _write(f"{self.dir}/{name}", text)
            except OSError as exc:
                raise ThrottleError(f"--throttle: device {d}: the kernel refused "
                                    f"the limit ({self.dir}/{name}: "
                                    f"{exc.strerror})") from None

    @contextlib.contextmanager
    def spawning(self):
        """This process is in the cgroup inside the block, so that the
        children it starts there are too."""
        _write(f"{self.dir}/cgroup.procs", str(os.getpid()))
        try:
            yield
        finally:
            _write(self.home, str(os.getpid()))

    def counts(self):
        """(reads, bytes) the kernel counted in the cgroup on the disks."""
        mine = {dev_text(d) for d in self.disks}
        reads = nbytes = 0
        if self.hierarchy.version == 2:
            for line in _read(f"{self.dir}/io.stat").splitlines():
                fields = line.split()
                if fields and fields[0] in mine:
                    stat = dict(f.split("=", 1) for f in fields[1:] if "=" in f)
                    reads += int(stat.get("rios", 0))
                    nbytes += int(stat.get("rbytes", 0))
            return reads, nbytes
        for name in ("blkio.throttle.io_serviced", "blkio.throttle.io_service_bytes"):
            for line in _read(f"{self.dir}/{name}").splitlines():
                fields = line.split()
                if len(fields) == 3 and fields[0] in mine and fields[1] == "Read":
                    if name.endswith("serviced"):
                        reads += int(fields[2])
                    else:
                        nbytes += int(fields[2])
        return reads, nbytes

    def _kill_members(self, limit_s=5.0):
        """Processes the command left in the cgroup are killed, so that it
        can be removed."""
        deadline = time.monotonic() + limit_s
        while time.monotonic() < deadline:
            try:
                pids = [int(p) for p in _read(f"{self.dir}/cgroup.procs").split()]
            except OSError:
                return
            pids = [p for p in pids if p != os.getpid()]
            if not pids:
                return
            for pid in pids:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
            time.sleep(0.01)

    def remove(self):
        """Leaves, kills what is left, removes the cgroup; idempotent."""
        masked = signal.pthread_sigmask(signal.SIG_BLOCK, _SIGNALS)
        try:
            if self.dir:
                with contextlib.suppress(OSError):
                    _write(self.home, str(os.getpid()))
                self._kill_members()
                self._rmdir()
            if self.enabled_io and not self.dir:
                with contextlib.suppress(OSError):
                    _write(f"{self.hierarchy.point}/cgroup.subtree_control", "-io")
                self.enabled_io = False
            for sig, handler in self.old_handlers.items():
                signal.signal(sig, handler)
            self.old_handlers = {}
        finally:
            signal.pthread_sigmask(signal.SIG_SETMASK, masked)

    def _rmdir(self):
        for _ in range(100):
            try:
                os.rmdir(self.dir)
            except FileNotFoundError:
                pass
            except OSError as exc:
                if exc.errno == errno.EBUSY:
                    time.sleep(0.01)
                    continue
                raise ThrottleError(f"{self.dir}: the throttle cgroup could not "
                                    f"be removed: {exc.strerror}") from None
            self.dir = None
            return
        raise ThrottleError(f"{self.dir}: the throttle cgroup could not be "
                            "removed: still busy")
