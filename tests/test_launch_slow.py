"""pack and launch where a request costs a seek (issue 43), on diskemu's
emulated disks: pack keeps the disk's read-ahead while recording there and
packs the file system's metadata, which the launch reads first, in disk
order; a pack of another device is one line and the command starts; a
device that fails in the middle of the prefetch does not keep the command
from starting, whose exit status stays the launch's; the sorted read
goes on beside the command for the lead; a reader of the command's output
does not wait for the prefetch; the benchmark interrupted at any point
leaves nothing behind.

Ground truth is the kernel's: the files' page cache (mincore,
cachestat(2)), the device's (cachestat(2) on the device node), sysfs's
read_ahead_kb, losetup, /proc.
"""
import contextlib
import ctypes
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time

import pytest

import loopimg
import pagecache_util
from conftest import REPO, require_root, session_ends

sys.path.insert(0, os.path.join(REPO, "analysis"))
from pagetrace.core import packfile  # noqa: E402
from pagetrace.tools import diskemu  # noqa: E402

PAGETRACE = os.path.join(REPO, "scripts", "pagetrace")
APP = os.path.join(REPO, "samples", ".output", "startup-app")
BENCH = os.path.join(REPO, "bench", "launch_disk.py")
PAGE = os.sysconf("SC_PAGE_SIZE")


@pytest.fixture(autouse=True)
def _root():
    require_root()


def pagetrace(*args, **kw):
    kw.setdefault("capture_output", True)
    kw.setdefault("text", True)
    return subprocess.run([sys.executable, PAGETRACE, *args], **kw)


@contextlib.contextmanager
def emulated_fs(profile, fill, size_mib=96):
    """An ext4 image, filled by fill(mountpoint) on a plain loop mount, then
    served by diskemu under PROFILE and mounted read-only (no journal
    replay) on the same directory. Yields (mountpoint, device, diskemu)."""
    work = tempfile.mkdtemp(prefix="pagetrace-slow-")
    image, point = os.path.join(work, "fs.img"), os.path.join(work, "mnt")
    os.mkdir(point)
    with open(image, "wb") as f:
        f.truncate(size_mib << 20)
    loopimg.run("mkfs.ext4", "-q", "-F", image)
    loopimg.run("mount", "-o", "loop", image, point)
    try:
        fill(point)
    finally:
        loopimg.run("umount", point)
    disk = diskemu.EmulatedDisk(image, profile)
    disk.__enter__()
    try:
        loopimg.run("mount", "-o", "ro,noload", disk.device, point)
        try:
            yield point, disk.device, disk
        finally:
            if loopimg.run("umount", point, check=False).returncode:
                loopimg.run("umount", "-l", point, check=False)
    finally:
        disk.stop()
        shutil.rmtree(work, ignore_errors=True)


def app_files(point):
    subprocess.run([APP, "--setup", f"{point}/app"], check=True, capture_output=True)


class _Range(ctypes.Structure):
    _fields_ = [("off", ctypes.c_uint64), ("len", ctypes.c_uint64)]


class _Stat(ctypes.Structure):
    _fields_ = [(n, ctypes.c_uint64) for n in ("cache", "dirty", "wb", "evicted", "recent")]


def device_cached(device, pages):
    """The pages (page numbers) of the block device's page cache that are
    cached now: cachestat(2) on the device node, page by page."""
    libc = ctypes.CDLL(None, use_errno=True)
    fd = os.open(device, os.O_RDONLY)
    try:
        cached = set()
        for page in pages:
            rng, st = _Range(page * PAGE, PAGE), _Stat()
            assert libc.syscall(451, fd, ctypes.byref(rng), ctypes.byref(st), 0) == 0
            if st.cache:
                cached.add(page)
        return cached
    finally:
        os.close(fd)


def drop_caches():
    os.sync()
    with open("/proc/sys/vm/drop_caches", "w") as f:
        f.write("3\n")


def read_ahead_kb(device):
    with open(f"/sys/block/{os.path.basename(device)}/queue/read_ahead_kb") as f:
        return int(f.read())


def test_pack_on_a_seeking_disk_keeps_read_ahead_and_packs_metadata(tmp_path):
    with emulated_fs("hdd-7200", app_files) as (point, device, _):
        before = read_ahead_kb(device)
        pack_path = tmp_path / "app.pack"
        done = pagetrace("pack", "-n", "1", "-o", str(pack_path), "--", APP, f"{point}/app")
        assert done.returncode == 0, done.stderr
        name = os.path.basename(device)
        rdev = os.stat(device).st_rdev
        disk = f"{os.major(rdev)}:{os.minor(rdev)}"
        assert f"read_ahead_kb left as it is while recording: {disk}: a random read took" \
            in done.stderr, done.stderr
        assert read_ahead_kb(device) == before
        pack = packfile.read(pack_path)
        assert pack.read_ahead_kb == "unchanged"
        assert pack.request_us[disk] >= 2000
        meta = [i for i, f in enumerate(pack.files) if f.path == device]
        assert meta, f"no metadata of {name} in the pack"
        pages = {r.page + k for r in pack.ranges if r.file == meta[0] for k in range(r.pages)}
        assert pages
        # The launch (handed to the planner: the device seeks) reads them
        # first, through the device's page cache, which ext4's buffers are.
        drop_caches()
        cold = device_cached(device, pages)
        report = tmp_path / "report.json"
        done = pagetrace("launch", "--report", str(report), str(pack_path), "--",
                         "sh", "-c", "exit 5")
        assert done.returncode == 5, done.stderr
        assert '"mode": "sorted"' in report.read_text()
        assert device_cached(device, pages) >= pages - cold
        assert len(pages - cold) > 0


def _scattered(point, files=12, size=8 << 20):
    os.makedirs(f"{point}/data")
    for n in range(files):
        with open(f"{point}/data/f{n}", "wb") as f:
            f.write(os.urandom(size))


def scattered_pack(point, path):
    """A pack of every other 64 KiB of the files under point/data, which
    measured a seek: launch prefetches it sorted, before the command."""
    files = [packfile.identify(f"{point}/data/{n}") for n in sorted(os.listdir(f"{point}/data"))]
    ranges = [packfile.PackRange(i, page, 16, 0)
              for i, f in enumerate(files) for page in range(0, f.size // PAGE, 32)]
    pack = packfile.Pack(packfile.FORMAT_VERSION, PAGE, int(time.time()), "test", 1, 0,
                         files, ranges, {files[0].dev: 15000})
    packfile.write(pack, path)


@pytest.mark.parametrize("fault", ["killed", "unmounted"])
def test_device_failing_mid_prefetch_still_starts_the_command(tmp_path, fault):
    """The disk's daemon killed (every read fails from then on), or the
    file system unmounted (lazily: the prefetch's files stay open), in the
    middle of the sorted prefetch: the command runs, and the launch's exit
    status is its."""
    marker = tmp_path / "ran"
    with emulated_fs("hdd-5400", _scattered, size_mib=160) as (point, device, disk):
        pack = tmp_path / "data.pack"
        scattered_pack(point, pack)
        drop_caches()
        launch = subprocess.Popen(
            [sys.executable, PAGETRACE, "launch", str(pack), "--", "sh", "-c",
             f"echo ran > {marker}; exit 6"], stderr=subprocess.PIPE, text=True)
        time.sleep(0.4)
        assert launch.poll() is None, "the prefetch ended before the fault"
        if fault == "killed":
            disk.proc.kill()
        else:
            loopimg.run("umount", "-l", point)
        _, err = launch.communicate(timeout=120)
        assert launch.returncode == 6, err
        assert marker.read_text() == "ran\n"
        assert all(line.startswith("pagetrace launch: ") for line in err.splitlines()), err


def test_pack_of_another_device_is_one_line_and_the_command_starts(tmp_path):
    """The same files at the same paths, on another device (a copy of the
    image): every file is named on one line, the command runs."""
    with loopimg.loop_mount("ext4", size_mib=32) as (point, loop):
        _scattered(point, files=3, size=1 << 20)
        pack = tmp_path / "a.pack"
        scattered_pack(point, pack)
        image = tmp_path / "copy.img"
        subprocess.run(["dd", f"if={loop}", f"of={image}", "bs=1M", "status=none"], check=True)
        loopimg.run("umount", point)
        loopimg.run("mount", "-o", "loop,ro,noload", str(image), point)
        try:
            done = pagetrace("launch", str(pack), "--", "sh", "-c", "exit 4")
        finally:
            loopimg.run("umount", point)
            loopimg.run("mount", loop, point)
    assert done.returncode == 4
    lines = done.stderr.splitlines()
    assert len(lines) == 1, done.stderr
    assert lines[0].startswith("pagetrace launch: 3 of 3 files not prefetched: 3 ")
    assert "not mounted" in lines[0] or "replaced" in lines[0]


def _leftovers(work, image):
    loops = subprocess.run(["losetup", "-j", image], capture_output=True, text=True).stdout
    procs = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                if work.encode() in f.read():
                    procs.append(pid)
        except OSError:
            pass
    return loops.strip(), procs


@pytest.mark.parametrize("after_s", [1.0, 4.0, 9.0, 15.0])
def test_bench_interrupted_anywhere_leaves_nothing(tmp_path, after_s):
    """bench/launch_disk.py on an emulated disk, SIGINT after AFTER_S
    (recording, packing, the states): nothing left attached or running, and
    read_ahead_kb of the machine's disks as it was."""
    work = str(tmp_path / "w")
    os.makedirs(f"{work}/img")
    image = f"{work}/app.img"
    with open(image, "wb") as f:
        f.truncate(64 << 20)
    loopimg.run("mkfs.ext4", "-q", "-F", image)
    loopimg.run("mount", "-o", "loop", image, f"{work}/img")
    try:
        os.makedirs(f"{work}/img/usr/share/pagetrace-slow")
        with open(f"{work}/img/usr/share/pagetrace-slow/f", "wb") as f:
            f.write(os.urandom(8 << 20))
    finally:
        loopimg.run("umount", f"{work}/img")
    # The machine's disks (a loop device keeps what its last user set).
    ras = {p: open(p).read() for p in
           (f"/sys/block/{d}/queue/read_ahead_kb" for d in os.listdir("/sys/block")
            if not d.startswith(("loop", "zram")))
           if os.path.exists(p)}
    bench = subprocess.Popen(["unshare", "-m", "--propagation", "private", sys.executable,
                              BENCH, "inside", "hdd-7200", work, "3", "--", "cat",
                              "/usr/share/pagetrace-slow/f"],
                             stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    time.sleep(after_s)
    assert bench.poll() is None, "the bench ended before it was interrupted"
    bench.send_signal(signal.SIGINT)
    _, err = bench.communicate(timeout=120)
    assert bench.returncode == 130, err
    deadline = time.monotonic() + 10
    while _leftovers(work, image) != ("", []) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert _leftovers(work, image) == ("", []), err
    for path, value in ras.items():
        if os.path.exists(path):
            assert open(path).read() == value, path


AT_START = """\
import sys
sys.path.insert(0, {tests!r})
import pagecache_util
wanted = {wanted!r}
print(sum(len(pagecache_util.cached_since_eviction(p) & pages)
          for p, pages in wanted.items()), file=open({marker!r}, "w"))
sys.exit(7)
"""


def first_used_late(point, pack_path):
    """scattered_pack's pack, its start using the disk first 30 s in (the
    lead: 30 s); its pages evicted. {path: set of its pages}, and their
    number."""
    scattered_pack(point, pack_path)
    pack = packfile.read(pack_path)
    packfile.write(pack._replace(ranges=[r._replace(ts_us=30_000_000) for r in pack.ranges]),
                   pack_path)
    wanted = {}
    for r in pack.ranges:
        wanted.setdefault(pack.files[r.file].path, set()).update(range(r.page, r.page + r.pages))
    drop_caches()
    pagecache_util.evict(*wanted)
    return wanted, sum(len(p) for p in wanted.values())


def cached_of(wanted):
    """How many of `wanted`'s pages were cached since their eviction."""
    return sum(len(pagecache_util.cached_since_eviction(p) & pages)
               for p, pages in wanted.items())


@pytest.mark.parametrize("lead", ["0", "auto"])
def test_sorted_read_goes_on_beside_the_command_for_the_lead(tmp_path, lead):
    """On a disk that seeks, the sorted read is waited for to its end with
    --lead 0: every page of the pack is cached when the command starts.
    With --lead auto and a pack whose start first used the disk 30 s in,
    the command starts while the read goes on (some pages not cached yet),
    the read then ends beside it with every page cached, and nothing of the
    launch is left. Ground truth: mincore and cachestat(2), /proc."""
    with emulated_fs("hdd-7200", _scattered, size_mib=160) as (point, device, _):
        pack_path = tmp_path / "data.pack"
        wanted, total = first_used_late(point, pack_path)
        marker, report = tmp_path / "at-start", tmp_path / "report.json"
        code = AT_START.format(tests=os.path.dirname(__file__), wanted=wanted,
                               marker=str(marker))
        launch = subprocess.Popen(
            [sys.executable, PAGETRACE, "launch", "--lead", lead, "--report", str(report),
             str(pack_path), "--", sys.executable, "-c", code],
            stderr=subprocess.PIPE, text=True, start_new_session=True)
        _, err = launch.communicate(timeout=120)
        assert launch.returncode == 7, err
        decided = json.loads(report.read_text())
        assert decided["mode"] == "sorted", decided
        at_start = int(marker.read_text())
        if lead == "0":
            assert decided["lead_s"] == 0.0
            assert at_start == total, f"{at_start} of {total} pages cached at the start"
            return
        assert decided["lead_s"] == 30.0
        assert at_start < total, "the read had ended when the command started"
        assert session_ends(launch.pid, 60) == [], "the read never ended"
        cached = cached_of(wanted)
        assert cached == total, f"{cached} of {total} pages cached after the read"


@pytest.mark.parametrize("mode", ["concurrent", "sorted"])
def test_a_reader_of_the_commands_output_does_not_wait_for_the_prefetch(tmp_path, mode):
    """`pagetrace launch PACK -- echo hi | reader`: the reader sees the end
    of the output when echo ends, while the prefetch beside it (the C
    launcher's in first-access order; the planner's sorted read with a
    lead of 30 s) is still reading; the prefetch then ends on its own."""
    with emulated_fs("hdd-5400", _scattered, size_mib=160) as (point, device, _):
        pack_path = tmp_path / "data.pack"
        wanted, total = first_used_late(point, pack_path)
        launch = subprocess.Popen(
            [sys.executable, PAGETRACE, "launch", "-q", "--mode", mode, str(pack_path),
             "--", "echo", "hi"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            start_new_session=True)
        out = launch.stdout.read()
        at_eof = cached_of(wanted)
        _, err = launch.communicate(timeout=120)
        assert (launch.returncode, out, err) == (0, b"hi\n", b"")
        # The prefetch takes about 1.5 s there; echo, a few ms (the pages
        # last asked for may still be in flight when it ends: half, not all).
        assert at_eof < total // 2, \
            f"{at_eof} of {total} pages cached when the output ended"
        assert session_ends(launch.pid, 60) == [], "the prefetch never ended"
