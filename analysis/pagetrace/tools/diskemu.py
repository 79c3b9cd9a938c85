"""The emulated spinning disk (diskemu/, docs/diskemu.md) from Python: its
profile table, the model's figures, and the daemon's life.

Standard library only: startup-bench runs it under sudo with the system
Python.

    profiles = diskemu.load_profiles()           # name -> dict of figures
    with diskemu.EmulatedDisk("disk.img", "hdd-7200") as disk:
        disk.device                               # "/dev/loopN"
    disk.stats                                    # the daemon's counts

    with diskemu.private_mounts():                # this process only
        with diskemu.EmulatedDisk(image, "hdd-7200", mount=point):
            ...                                   # the image's files at point

The daemon is stopped (SIGTERM) and waited for when the `with` ends, also
on an exception or KeyboardInterrupt; it unmounts and detaches everything
it set up, and it stops by itself if this process dies
(--exit-with-parent).
"""
import contextlib
import ctypes
import json
import math
import os
import select
import subprocess

_TOP = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__)))))
# The source tree, then where `make install` puts them.
_PROGRAMS = (os.path.join(_TOP, "diskemu", "diskemu"), "pagetrace-diskemu")
_TABLES = (os.path.join(_TOP, "diskemu", "profiles.tsv"),
           os.path.join(_TOP, "pagetrace", "diskemu-profiles.tsv"))

_COLUMNS = ("name", "rpm", "capacity", "avg_seek_ms", "t2t_ms", "full_ms",
            "boundary_fraction", "outer_MBps", "inner_MBps", "zones",
            "overhead_ms", "readahead")
_SUFFIX = {"k": 1 << 10, "m": 1 << 20, "g": 1 << 30}
# Steps of the numerical mean seek, as drive_model.c.
_MEAN_STEPS = 20000


class DiskEmuError(Exception):
    """`what: why`, said in one line by the caller, which then exits."""


def program():
    """The diskemu executable: the source tree's, else the installed one."""
    return _PROGRAMS[0] if os.access(_PROGRAMS[0], os.X_OK) else _PROGRAMS[1]


def table_path():
    for path in _TABLES:
        if os.path.exists(path):
            return path
    return _TABLES[0]


def _size(text):
    text = text.lower()
    if text[-1:] in _SUFFIX:
        return int(text[:-1]) * _SUFFIX[text[-1]]
    return int(text)


def _profile(cols):
    p = dict(zip(_COLUMNS, cols))
    out = {"name": p["name"], "zones": int(p["zones"]),
           "readahead": _size(p["readahead"])}
    for key in _COLUMNS[1:9] + ("overhead_ms",):
        out[key] = float(p[key])
    return out


def load_profiles(path=None):
    """{name: figures} from the profile table (the same file diskemu reads)."""
    path = path or table_path()
    profiles, header = {}, True
    with open(path) as f:
        for line in f:
            cols = line.split("#", 1)[0].split()
            if not cols:
                continue
            if header:
                header = False
                continue
            if len(cols) != len(_COLUMNS):
                raise DiskEmuError(f"{path}: a line has {len(cols)} columns,"
                                   f" expected {len(_COLUMNS)}")
            profiles[cols[0]] = _profile(cols)
    return profiles


def is_profile(name, path=None):
    try:
        return name in load_profiles(path)
    except OSError:
        return False


class SeekCurve:
    """The profile's seek curve, as drive_model.c builds it: the boundary
    time solved so that the mean over random pairs is the average seek."""

    def __init__(self, profile):
        self.p = profile
        self.boundary_ms = 0.0
        at0 = self.mean_ms(profile["capacity"])
        self.boundary_ms = 1.0
        at1 = self.mean_ms(profile["capacity"])
        self.boundary_ms = (profile["avg_seek_ms"] - at0) / (at1 - at0)

    def ms(self, distance):
        p = self.p
        f = min(distance / p["capacity"], 1.0)
        if f <= 0:
            return 0.0
        b = p["boundary_fraction"]
        if f <= b:
            return p["t2t_ms"] + (self.boundary_ms - p["t2t_ms"]) * math.sqrt(
                f / b)
        return self.boundary_ms + (p["full_ms"] - self.boundary_ms) * (
            f - b) / (1 - b)

    def mean_ms(self, span):
        step = span / _MEAN_STEPS
        return sum(self.ms((i + 0.5) * step) * 2 * (span - (i + 0.5) * step)
                   / span ** 2 * step for i in range(_MEAN_STEPS))


def rotation_ms(profile):
    """Mean rotational latency: half a revolution."""
    return 30_000.0 / profile["rpm"]


def zone_rate(profile, offset):
    """Media rate in bytes/s at OFFSET (its zone's), as drive_model.c."""
    zones = profile["zones"]
    zone = min(max(int(offset / profile["capacity"] * zones), 0), zones - 1)
    outer, inner = profile["outer_MBps"] * 1e6, profile["inner_MBps"] * 1e6
    return outer if zones == 1 else outer + (inner - outer) * zone / (zones - 1)


def hdd_model_params(profile):
    """Keyword arguments of pagetrace.model.HDDModel for a profile (its
    outer-zone rate: HDDModel has one)."""
    curve = SeekCurve(profile)
    return {"rpm": profile["rpm"],
            "transfer_bytes_per_s": profile["outer_MBps"] * 1e6,
            "capacity_bytes": profile["capacity"],
            "track_to_track_ms": profile["t2t_ms"],
            "boundary_fraction": profile["boundary_fraction"],
            "boundary_ms": curve.boundary_ms,
            "full_stroke_ms": profile["full_ms"],
            "per_request_ms": profile["overhead_ms"]}


def predict(image, profile_name, profiles=None):
    """diskemu --predict --json for IMAGE: the model's figures."""
    cmd = [program(), "--predict", "--json", "--profile", profile_name, image]
    if profiles:
        cmd[1:1] = ["--profiles", profiles]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode:
        raise DiskEmuError(proc.stderr.strip() or "diskemu --predict failed")
    return json.loads(proc.stdout)


class EmulatedDisk:
    """diskemu serving IMAGE under PROFILE while the `with` lasts."""

    def __init__(self, image, profile="hdd-7200", mount=None, log=None,
                 profiles=None, ready_timeout=30.0):
        self.image, self.profile, self.mount = image, profile, mount
        self.log, self.profiles = log, profiles
        self.ready_timeout = ready_timeout
        self.device = None
        self.stats = None
        self.stderr = ""
        self.proc = None

    def _argv(self):
        argv = [program(), "--json", "-q", "--exit-with-parent",
                "--profile", self.profile]
        for opt, value in (("--mount", self.mount), ("--log", self.log),
                           ("--profiles", self.profiles)):
            if value:
                argv += [opt, value]
        return argv + [self.image]

    def _ready_line(self):
        ready, _, _ = select.select([self.proc.stdout], [], [],
                                    self.ready_timeout)
        return self.proc.stdout.readline() if ready else ""

    def __enter__(self):
        self.proc = subprocess.Popen(self._argv(), stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE, text=True)
        try:
            line = self._ready_line()
        except BaseException:
            self.stop()
            raise
        if not line:
            self.stop()
            raise DiskEmuError(self.stderr.strip()
                               or "diskemu: no device within "
                               f"{self.ready_timeout:g} s")
        self.device = json.loads(line)["device"]
        return self

    def stop(self, timeout=30.0):
        """SIGTERM, then waits for the teardown; returns the exit status."""
        if self.proc is None or self.proc.returncode is not None:
            return self.proc.returncode if self.proc else None
        self.proc.terminate()
        try:
            out, err = self.proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            out, err = self.proc.communicate()
        self.stderr += err
        for line in out.splitlines():
            if line.startswith('{"reads"'):
                self.stats = json.loads(line)
        return self.proc.returncode

    def __exit__(self, *exc):
        status = self.stop()
        if status and exc[0] is None:
            raise DiskEmuError(self.stderr.strip()
                               or f"diskemu: exit status {status}")


_CLONE_NEWNS = 0x00020000
_MS_REC, _MS_PRIVATE = 0x4000, 1 << 18


@contextlib.contextmanager
def private_mounts():
    """From here on this process (and its children) has mounts of its own:
    what it mounts no other process sees, and they go when it exits. For
    good: a process cannot go back to the shared namespace once threads
    may exist, so call it in a process that is about to exit anyway."""
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.unshare(_CLONE_NEWNS) != 0:
        err = ctypes.get_errno()
        raise DiskEmuError(f"cannot make a private mount namespace: "
                           f"{os.strerror(err)}")
    if libc.mount(b"none", b"/", None, _MS_REC | _MS_PRIVATE, None) != 0:
        err = ctypes.get_errno()
        raise DiskEmuError(f"cannot make the mounts private: "
                           f"{os.strerror(err)}")
    yield


def image_under(path, mountinfo="/proc/self/mountinfo"):
    """(mount point, image) of the loop-mounted file system holding PATH.
    DiskEmuError when it is not on a loop device over an image file."""
    dev = os.stat(path).st_dev
    with open(mountinfo) as f:
        for line in f:
            fields = line.split()
            major, minor = (int(x) for x in fields[2].split(":"))
            if os.makedev(major, minor) != dev:
                continue
            point = fields[4].encode().decode("unicode_escape")
            source = fields[fields.index("-") + 2]
            backing = f"/sys/block/{os.path.basename(source)}/loop/" \
                "backing_file"
            if source.startswith("/dev/loop") and os.path.exists(backing):
                with open(backing) as b:
                    return point, b.read().strip()
    raise DiskEmuError(f"{path}: not on a loop device's image (put the "
                       "files in an image: docs/diskemu.md)")


def settle(point):
    """Writes everything, journal included, to its final place in the
    image (diskemu mounts it without journal recovery): freeze and thaw."""
    import fcntl
    os.sync()
    fifreeze, fithaw = 0xC0045877, 0xC0045878
    fd = os.open(point, os.O_RDONLY)
    try:
        fcntl.ioctl(fd, fifreeze, 0)
        fcntl.ioctl(fd, fithaw, 0)
    except OSError:
        pass
    finally:
        os.close(fd)


@contextlib.contextmanager
def emulated_under(path, profile):
    """The emulated disk under the file system holding PATH, mounted over
    it in this process's own mount namespace (for good: see
    private_mounts) while the `with` lasts. Yields the EmulatedDisk."""
    point, image = image_under(path)
    settle(point)
    with private_mounts():
        with EmulatedDisk(image, profile, mount=point) as disk:
            yield disk
