"""pagetrace pack, launch and export --format (issue 22).

The pack reader against its conformance samples (samples/pack/), and the
tools end to end on a loop-mounted ext4 image: what the launch prefetched
is read back from the kernel with mincore(2) and cachestat(2) (pages
cached since the eviction: DAMON may reclaim them meanwhile), never from
the launch's own report; the mode it chose is checked against a blk-throttle cgroup made
here; read_ahead_kb is read back from sysfs after `pack`.
"""
import collections
import contextlib
import glob
import json
import os
import random
import select
import signal
import stat
import subprocess
import sys
import time
import zlib

import pytest

import loopimg
from conftest import REPO, require_root
import pagecache_util
from pagecache_util import cached_since_eviction

sys.path.insert(0, os.path.join(REPO, "analysis"))
from pagetrace.core import packfile, tracefile, tracewriter  # noqa: E402
from pagetrace.tools import launch, launch_plan, packexport, packrecord, packruntime, throttle  # noqa: E402,E501

PAGETRACE = os.path.join(REPO, "scripts", "pagetrace")
APP = os.path.join(REPO, "samples", ".output", "startup-app")
SAMPLES = os.path.join(REPO, "samples", "pack")
PAGE = os.sysconf("SC_PAGE_SIZE")
# Runs as another user, who cannot enter the checkout's .venv: launch and
# pack need the standard library only.
SYSTEM_PYTHON = "/usr/bin/python3"


def pagetrace(*args, **kw):
    kw.setdefault("capture_output", True)
    kw.setdefault("text", True)
    return subprocess.run([sys.executable, PAGETRACE, *args], **kw)


# ---------------------------------------------------------------------------
# The format: conformance samples, round trip.

@pytest.mark.unit
@pytest.mark.parametrize("name", sorted(os.path.basename(p)[:-5] for p in
                                        glob.glob(os.path.join(SAMPLES, "*.pack"))))
def test_pack_conformance(name):
    with open(os.path.join(SAMPLES, name + ".expect.json")) as f:
        expected = json.load(f)
    path = os.path.join(SAMPLES, name + ".pack")
    if "refused" in expected:
        with pytest.raises(packfile.PackError) as caught:
            packfile.read(path)
        assert caught.value.reason == expected["refused"]
        assert str(caught.value) == f"{path}: {expected['refused']}"
        return
    pack = packfile.read(path)
    assert packfile.as_json(pack) == expected["pack"]
    # The writer gives back the very bytes (one writer, one reader).
    with open(path, "rb") as f:
        assert packfile.render(pack) == f.read()


@pytest.mark.unit
def test_launch_reads_range_lines_as_the_reader_does(tmp_path):
    """packfile.range_triples, the concurrent prefetch's fast path,
    gives the reader's ranges for every valid sample, and the reader's
    refusal for a range line it does not take (checksum made good)."""
    for path in glob.glob(os.path.join(SAMPLES, "*.pack")):
        data = open(path, "rb").read()
        try:
            pack = packfile.parse_bytes(data, path)
        except packfile.PackError:
            continue
        assert packfile.range_triples(data, path) == [
            (r.file, r.page, r.pages) for r in pack.ranges], path
    data = open(os.path.join(SAMPLES, "basic.pack"), "rb").read()
    body = data[:data.rindex(b"# crc32: ")]
    for bad, reason in ((b"range 9 0 1 0\n", "file 9 is not listed"),
                        (b"range 0 0 0 0\n", "a range of 0 pages"),
                        (b"range 0 0 1 0 range 0 1 1 0\n", "a range line has 4 fields")):
        broken = body + bad
        broken += b"# crc32: %08x\n" % zlib.crc32(broken)
        with pytest.raises(packfile.PackError, match=reason):
            packfile.range_triples(broken, "broken.pack")


@pytest.mark.unit
def test_version_error_is_its_own_kind():
    with pytest.raises(packfile.PackVersionError):
        packfile.read(os.path.join(SAMPLES, "version-2.pack"))


@pytest.mark.unit
def test_header_only_read_checks_the_checksum_too():
    with pytest.raises(packfile.PackError, match="checksum mismatch"):
        packfile.read(os.path.join(SAMPLES, "bad-checksum.pack"), ranges=False)
    pack = packfile.read(os.path.join(SAMPLES, "basic.pack"), ranges=False)
    assert pack.ranges is None and len(pack.files) == 2


# ---------------------------------------------------------------------------
# Compiling: used pages, consensus, grouping in first-access order.

def _trace(tmp_path, name, lines):
    text = ("# pagetrace-format: 2\n# page-size: 4096\n"
            "# columns: timestamp_us path offset kind\n# records: read access map\n"
            + "".join(lines))
    path = tmp_path / name
    path.write_text(text)
    return tracefile.read(str(path))


@pytest.mark.unit
def test_compile_preloads_adds_the_forced_readahead_pages(tmp_path):
    """pack --preloads: the pages the program read ahead itself (cause
    forced_ra), used or not, at the time of their read; not without it."""
    a = tmp_path / "a"
    a.write_bytes(b"A" * 40960)
    text = ("# pagetrace-format: 2\n# page-size: 4096\n"
            "# columns: timestamp_us path offset kind pid tid comm cause dev ino\n"
            "# records: read access map\n"
            f"100 {a} 0 read 1 1 app fault 7:0 12\n"
            f"100 {a} 0 access 1 1 app fault 7:0 12\n"
            f"200 {a} 16384 read 1 1 app forced_ra 7:0 12\n"
            f"200 {a} 20480 read 1 1 app forced_ra 7:0 12\n"
            f"300 {a} 20480 access 1 1 app fault 7:0 12\n"
            f"400 {a} 32768 read 1 1 app sync_ra 7:0 12\n")
    (tmp_path / "r.log").write_text(text)
    trace = tracefile.read(str(tmp_path / "r.log"))
    plain = packrecord.compile_pack([trace], "app", 0)
    assert [(r.page, r.pages, r.ts_us) for r in plain.ranges] == [(0, 1, 0), (5, 1, 200)]
    pre = packrecord.compile_pack([trace], "app", 0, preloads=True)
    # Page 4, read ahead at 200 and never used, comes in; page 5 (used at
    # 300) joins its range; page 8, read by readahead the kernel chose, not.
    assert [(r.page, r.pages, r.ts_us) for r in pre.ranges] == [(0, 1, 0), (4, 2, 100)]


def _a_block_device():
    """A block device node that can be opened (a loop device's, attached
    or not; this VM refuses to open its own disk's node)."""
    for name in sorted(os.listdir("/sys/block")):
        try:
            os.close(os.open(f"/dev/{name}", os.O_RDONLY | os.O_NONBLOCK))
            return f"/dev/{name}"
        except OSError:
            continue
    pytest.skip("no block device node that can be opened")


@pytest.mark.unit
@pytest.mark.parametrize("seeks", [True, False])
def test_compile_packs_metadata_only_on_a_device_that_seeks(tmp_path, monkeypatch, seeks):
    """The trace's metadata records (pages of the device node) become the
    ranges of a file line for the node, at their first read, when a random
    read of that device took SEEK_US or more (request-us); not otherwise."""
    a, dev = tmp_path / "a", _a_block_device()
    a.write_bytes(b"A" * 8192)
    rdev = packfile.dev_text(os.stat(dev).st_rdev)
    adev = packfile.dev_text(os.stat(a).st_dev)
    us = launch_plan.SEEK_US if seeks else launch_plan.SEEK_US - 1
    monkeypatch.setattr(packrecord, "request_us", lambda files: {adev: 90, rdev: us})
    trace = _trace(tmp_path, "r.log", [f"100 {dev} 40960 read\n", f"105 {dev} 8192 read\n",
                                       f"110 {a} 0 read\n", f"120 {a} 0 access\n",
                                       f"130 {dev} 12288 read\n", f"140 {dev} 40960 read\n"])
    pack = packrecord.compile_pack([trace], "app", "unchanged")
    listed = [f.path for f in pack.files]
    if not seeks:
        assert listed == [str(a)]
        return
    assert listed == [dev, str(a)]
    assert pack.files[0].size == os.stat(dev).st_size
    # Page 10 read first (0 us), then page 2 (5 us), which page 3 (30 us)
    # joins as the page after it; the file's page at 20 us; 10's re-read
    # at 40 us is not a first read.
    assert [tuple(r) for r in pack.ranges] == [(0, 10, 1, 0), (0, 2, 2, 5), (1, 0, 1, 20)]


def _node_of(dev):
    """A block device node whose device number is `dev` (st_rdev), or None."""
    for name in sorted(os.listdir("/dev")):
        path = f"/dev/{name}"
        with contextlib.suppress(OSError):
            st = os.stat(path)
            if stat.S_ISBLK(st.st_mode) and st.st_rdev == dev:
                return path
    return None


@pytest.mark.unit
def test_a_device_node_is_prefetched_only_under_a_file_still_recorded(tmp_path):
    """A pack's device node (its file system's metadata) is kept when a
    regular file of the pack on that device is still the one recorded,
    whatever the node's own identity; not when none is."""
    require_root()
    a = tmp_path / "a"
    a.write_bytes(b"A" * 8192)
    node = _node_of(os.stat(a).st_dev)
    if node is None:
        pytest.skip(f"no node in /dev for the device of {tmp_path}")
    other = _a_block_device()
    files = [packfile.identify(str(a)),
             packfile.PackFile(node, "0:5", 1, 0, 0, 0),
             packfile.PackFile(other, "0:5", 1, 0, 0, 0)]
    pack = packfile.Pack(1, PAGE, int(time.time()), "t", 1, 0, files, [], {})
    keep, skipped = launch.check_files(pack)
    assert keep == [0, 1]
    assert skipped == {"replaced": [other]}
    a.write_bytes(b"B" * 8192)  # the file changed: its device's node is not used
    keep, skipped = launch.check_files(pack)
    assert keep == [] and sorted(skipped["replaced"]) == sorted([node, other])


@pytest.mark.unit
def test_compile_groups_used_pages_in_first_access_order(tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    a.write_bytes(b"A" * 40960)
    b.write_bytes(b"B" * 8192)
    # Run 1: a's pages 0-3 read, 0, 1 and 3 accessed, then b's 0, then a's 2.
    # Run 2: the same plus a's page 9 (varying: only in run 2).
    common = [f"100 {a} 0 read\n", f"100 {a} 4096 read\n", f"100 {a} 8192 read\n",
              f"100 {a} 12288 read\n", f"110 {a} 0 access\n",
              f"120 {a} 4096 access\n", f"130 {b} 0 read\n",
              f"140 {b} 0 access\n", f"150 {a} 12288 access\n",
              f"160 {a} 8192 map\n"]
    run1 = _trace(tmp_path, "r1.log", common)
    run2 = _trace(tmp_path, "r2.log", common + [f"170 {a} 36864 read\n",
                                                 f"180 {a} 36864 access\n"])
    pack = packrecord.compile_pack([run1, run2], "app", 0, fill=0)
    paths = [f.path for f in pack.files]
    assert paths == [str(a), str(b)]
    # a 0-1 (first access 10 us after the start), b 0 (40), a 3 (50) then
    # a 2 (map, 60) joins no range before it: a range grows only forward.
    assert [tuple(r) for r in pack.ranges] == [
        (0, 0, 2, 10), (1, 0, 1, 40), (0, 3, 1, 50), (0, 2, 1, 60), (0, 9, 1, 80)]
    st = os.stat(a)
    assert pack.files[0].ino == st.st_ino and pack.files[0].size == 40960
    assert pack.files[0].head_crc32 == __import__("zlib").crc32(b"A" * 4096)
    consensus = packrecord.compile_pack([run1, run2], "app", 0, min_runs=2)
    assert (0, 9, 1, 80) not in [tuple(r) for r in consensus.ranges]
    filled = packrecord.compile_pack([run1, run2], "app", 0, fill=256)
    assert len(filled.ranges) == len(pack.ranges)  # one varying page: no pair


# ---------------------------------------------------------------------------
# Recording, launching, stale files: on a loop-mounted ext4 image.

@pytest.fixture(scope="module")
def app_image():
    require_root()
    assert os.access(APP, os.X_OK), "make -C samples builds startup-app"
    with loopimg.loop_mount("ext4", size_mib=64) as (mountpoint, loop):
        subprocess.run([APP, "--setup", f"{mountpoint}/app"], check=True,
                       capture_output=True)
        yield mountpoint, loop


def _read_ahead(loop):
    with open(f"/sys/block/{os.path.basename(loop)}/queue/read_ahead_kb") as f:
        return f.read().strip()


@pytest.fixture(scope="module")
def recorded(app_image, tmp_path_factory):
    mountpoint, loop = app_image
    before = _read_ahead(loop)
    out = tmp_path_factory.mktemp("pack")
    pack = out / "app.pack"
    done = pagetrace("pack", "-n", "2", "-o", str(pack), "--keep-traces",
                     str(out / "runs"), "--", APP, f"{mountpoint}/app")
    assert done.returncode == 0, done.stderr
    assert "read_ahead_kb 0 while recording" in done.stderr
    assert _read_ahead(loop) == before  # restored
    return mountpoint, str(pack), out


def _image_files(pack, mountpoint):
    return [f for f in pack.files if f.path.startswith(mountpoint)]


def _expected_pages(pack, entry):
    index = pack.files.index(entry)
    return {r.page + i for r in pack.ranges if r.file == index for i in range(r.pages)}


def _gaps_filled(pages, gap):
    """`pages` with every gap of at most `gap` pages between two filled."""
    ordered = sorted(pages)
    return set(pages).union(*(range(a + 1, b) for a, b in zip(ordered, ordered[1:])
                              if b - a - 1 <= gap))


def _evict(pack, mountpoint):
    for f in _image_files(pack, mountpoint):
        pagecache_util.evict(f.path)


@pytest.mark.parametrize("mode", ["sorted", "concurrent", "concurrent-window", "planned",
                                  "planned-gap"])
def test_launch_prefetches_exactly_the_pack(app_image, recorded, mode):
    mountpoint, pack_path, _ = recorded
    pack = packfile.read(pack_path)
    assert pack.runs == 2 and pack.read_ahead_kb == 0
    files = _image_files(pack, mountpoint)
    assert len(files) == 40
    _evict(pack, mountpoint)
    # --window: ranges read back before more are asked for, a window of
    # 8 KiB, smaller than some ranges: nothing more and nothing less read.
    options = {"concurrent-window": ["--mode", "concurrent", "--window", "8K"],
               "planned": ["--mode", "planned", "--gap", "0"],
               "planned-gap": ["--mode", "planned"]}.get(mode, ["--mode", mode])
    # CMD waits long enough for a concurrent prefetch to end; it reads nothing.
    done = pagetrace("launch", *options, pack_path, "--", "sleep", "1")
    assert done.returncode == 0, done.stderr
    # The prefetch has asked for every range (its grandchild held stderr
    # open until then); WILLNEED's reads may still be in flight.
    assert loopimg.wait_idle(app_image[1])
    for entry in files:
        expected = _expected_pages(pack, entry)
        if mode == "planned-gap":
            expected = _gaps_filled(expected, launch.CHEAP_GAP)
        if mode != "sorted":
            # --verify auto checks the content there: the first page is read.
            expected |= {0}
        assert cached_since_eviction(entry.path) == expected, (entry.path, done.stderr)


def test_launch_exit_status_is_the_commands(recorded):
    _, pack_path, _ = recorded
    assert pagetrace("launch", "-q", pack_path, "--", "sh", "-c", "exit 7").returncode == 7
    done = pagetrace("launch", pack_path, "--", "no-such-command-22")
    assert done.returncode == 127
    assert done.stderr == "pagetrace launch: no-such-command-22: command not found\n"


@pytest.mark.parametrize("mode", ["sorted", "concurrent"])
def test_stale_files_are_skipped_and_named_once(recorded, tmp_path, mode):
    mountpoint, pack_path, _ = recorded
    pack = packfile.read(pack_path)
    # The files as they are now (a test before may have replaced some).
    pack = pack._replace(files=[packfile.identify(f.path) for f in pack.files])
    files = _image_files(pack, mountpoint)
    changed, replaced, rewritten = files[0].path, files[1].path, files[2].path
    copy = tmp_path / "copy.pack"
    packfile.write(pack, str(copy))
    saved = {p: open(p, "rb").read() for p in (changed, replaced, rewritten)}
    stats = {p: os.stat(p) for p in saved}
    try:
        with open(changed, "ab") as f:
            f.write(b"x")
        with open(replaced + ".new", "wb") as f:
            f.write(saved[replaced])
        os.rename(replaced + ".new", replaced)
        # Same size, same mtime, other bytes: only the content check sees it.
        with open(rewritten, "r+b") as f:
            f.write(bytes(b ^ 0xFF for b in saved[rewritten][:16]))
        os.utime(rewritten, ns=(stats[rewritten].st_atime_ns, stats[rewritten].st_mtime_ns))
        _evict(pack, mountpoint)
        # Concurrent: the prefetching child checks the content and says the
        # line; the pipe ends when the prefetch has ended.
        done = pagetrace("launch", "--mode", mode, "--verify", "content",
                         str(copy), "--", "true")
        assert done.returncode == 0
        lines = [l for l in done.stderr.splitlines() if "not prefetched" in l]
        assert len(lines) == 1
        assert lines[0].startswith("pagetrace launch: 3 of ")
        assert f"1 changed ({changed})" in lines[0]
        assert f"1 replaced ({replaced})" in lines[0]
        assert f"1 changed (content) ({rewritten})" in lines[0]
        for path in (changed, replaced):
            assert not cached_since_eviction(path), path
        # The content check itself reads the first page, and nothing more.
        assert cached_since_eviction(rewritten) <= {0}
        assert cached_since_eviction(files[3].path) == _expected_pages(pack, files[3])
    finally:
        for path, data in saved.items():
            with open(path, "wb") as f:
                f.write(data)
            os.utime(path, ns=(stats[path].st_atime_ns, stats[path].st_mtime_ns))


def _all_replaced(pack, path):
    files = [f._replace(ino=f.ino + (1 << 40)) for f in pack.files]
    packfile.write(pack._replace(files=files), path)


LAUNCHER = os.path.join(REPO, "launch", "launch")


def _cpu_s(*args):
    """CPU time (user + system, from wait4's rusage) of one launch, by the
    C launcher as services and startup-bench run it."""
    proc = subprocess.Popen([LAUNCHER, "-q", *args],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    assert proc.returncode == 0
    return usage.ru_utime + usage.ru_stime


def test_all_stale_launch_costs_at_most_5_ms(recorded, tmp_path):
    """A launch with a pack of 200 replaced files against a launch with no
    pack at all (a missing file), both starting `true`, interleaved, the
    least CPU time of 21 each as the kernel counts it (wait4): on this
    shared 2-core machine wall time varies by tens of ms between runs."""
    mountpoint, pack_path, _ = recorded
    pack = packfile.read(pack_path)
    many = pack._replace(files=(_image_files(pack, mountpoint) * 5)[:200])
    stale = tmp_path / "stale.pack"
    _all_replaced(many, str(stale))
    missing = str(tmp_path / "missing.pack")
    done = pagetrace("launch", str(stale), "--", "true")
    assert done.returncode == 0
    assert done.stderr.count("\n") == 1
    assert done.stderr.startswith("pagetrace launch: 200 of 200 files not prefetched: 200 replaced")
    stale_s, none_s = [], []
    for _ in range(21):
        stale_s.append(_cpu_s(str(stale), "--", "true"))
        none_s.append(_cpu_s(missing, "--", "true"))
    cost = min(stale_s) - min(none_s)
    assert cost <= 0.005, f"{cost * 1e3:.1f} ms"


@pytest.mark.parametrize("cap", ["riops=150,rbps=150000000", "riops=3000,rbps=1000000"])
def test_mode_follows_a_read_iops_cap(recorded, app_image, tmp_path, cap):
    """Under a cap on read requests (hdd-150's), the prefetch is sorted and
    paid before the start, or not made; under one that the plan's bytes
    reach first, it goes beside the start in first-access order (planned)
    with the capped window."""
    mountpoint, pack_path, _ = recorded
    _, loop = app_image
    report = tmp_path / "report.json"
    pagetrace("launch", "--mode", "none", "--report", str(report), pack_path,
              "--", "true", check=True)
    limits = throttle.parse_limits(cap)
    disk = throttle.disk_of(f"{mountpoint}/app")
    with throttle.Cgroup(limits, [disk], "test-pack") as cgroup:
        with cgroup.spawning():
            proc = subprocess.Popen([sys.executable, PAGETRACE, "launch", "--report",
                                     str(report), pack_path, "--", "true"],
                                    stderr=subprocess.PIPE, text=True)
        _, err = proc.communicate()
    decided = json.loads(report.read_text())
    assert proc.returncode == 0, err
    pack = packfile.read(pack_path)
    keep = list(range(len(pack.files)))
    riops, rbps = limits.riops, limits.rbps
    _, requests, pages = launch_plan.plan_cost(pack, keep, decided.get("gap_pages", 0),
                                          decided.get("max_request_pages", 256), riops, rbps)
    if pages * pack.page_size / rbps >= requests / riops:
        assert decided["mode"] == "planned" and decided["window"] == launch.CAPPED_WINDOW
        assert decided["estimate_s"] <= launch.WORTH_IT * decided["cold_estimate_s"]
    # Sorted, unless the plan costs more than the start's own reads.
    elif decided["mode"] == "none":
        assert decided["estimate_s"] > launch.WORTH_IT * decided["cold_estimate_s"]
        assert "no prefetch: the sorted prefetch (" in err
    else:
        assert decided["mode"] == "sorted"
        assert decided["estimate_s"] <= launch.WORTH_IT * decided["cold_estimate_s"]
    assert (decided["mode"] == "planned") == ("riops=3000" in cap)
    assert f"{throttle.dev_text(disk)}: blk-throttle caps reads at {riops}/s" in decided["device"]


def test_a_seeking_device_goes_to_the_planner(recorded, tmp_path):
    """The pack's measured random read decides who launches: at 5 ms (a
    seek) the C launcher hands the launch to the Python planner, whose
    report has its estimates and a sorted prefetch (or none); at 50 us the
    C launcher prefetches beside CMD itself, with its 1 MiB window."""
    _, pack_path, _ = recorded
    pack = packfile.read(pack_path)
    for us, modes in ((5000, {"sorted", "none"}), (50, {"concurrent"})):
        path = tmp_path / f"{us}.pack"
        packfile.write(pack._replace(request_us={f.dev: us for f in pack.files}), str(path))
        report = tmp_path / f"{us}.json"
        done = pagetrace("launch", "--report", str(report), str(path), "--", "true")
        assert done.returncode == 0, done.stderr
        decided = json.loads(report.read_text())
        assert decided["mode"] in modes, decided
        if us == 5000:
            assert "a random read took 5000 us" in decided["device"]
            assert "estimate_s" in decided and "window" not in decided
        else:
            assert "50 us a random read" in decided["device"]
            assert decided["window"] == 1 << 20 and "estimate_s" not in decided


@pytest.mark.unit
def test_pack_problems_are_one_line_and_the_command_still_runs(tmp_path):
    for name, reason in (("version-2", "pack format version 2"),
                         ("bad-checksum", "checksum mismatch")):
        path = os.path.join(SAMPLES, name + ".pack")
        done = pagetrace("launch", path, "--", "sh", "-c", "exit 3")
        assert done.returncode == 3
        assert done.stderr.count("\n") == 1 and reason in done.stderr
        assert done.stderr.rstrip().endswith(": starting without prefetch")
        strict = pagetrace("launch", "--strict", path, "--", "true")
        assert strict.returncode == 1 and reason in strict.stderr


@pytest.mark.unit
def test_a_pack_that_is_not_a_regular_file(tmp_path):
    """A FIFO named as the pack does not hang either reader (opening it
    would wait for a writer); a directory or a FIFO is one line, and CMD
    still runs."""
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    for path, reason in ((fifo, "not a regular file"), (tmp_path, "Is a directory")):
        done = pagetrace("launch", str(path), "--", "sh", "-c", "exit 4", timeout=30)
        assert done.returncode == 4
        assert done.stderr == f"pagetrace launch: {path}: {reason}: starting without prefetch\n"
        with pytest.raises(packfile.PackError, match=reason):
            packfile.read(str(path))


@pytest.mark.unit
def test_file_on_a_device_not_mounted(tmp_path):
    pack = packfile.Pack(1, PAGE, int(time.time()), "x", 1, 0,
                         [packfile.PackFile("/nonexistent-22/lib.so", "259:4093",
                                            5, 4096, 1, 0)],
                         [packfile.PackRange(0, 0, 1, 0)])
    path = tmp_path / "gone.pack"
    packfile.write(pack, str(path))
    done = pagetrace("launch", str(path), "--", "true")
    assert done.returncode == 0
    assert done.stderr.startswith("pagetrace launch: 1 of 1 files not prefetched: "
                                  "1 on device 259:4093, not mounted (/nonexistent-22/lib.so)")


def test_too_old_pack_is_not_used(recorded, tmp_path):
    _, pack_path, _ = recorded
    pack = packfile.read(pack_path)
    old = tmp_path / "old.pack"
    packfile.write(pack._replace(created=int(time.time()) - 40 * 86400), str(old))
    done = pagetrace("launch", str(old), "--", "true")
    assert done.returncode == 0
    assert "days old, older than --max-age 30 days" in done.stderr
    assert "prefetching" not in done.stderr
    done = pagetrace("launch", "--max-age", "60d", str(old), "--", "true")
    assert "prefetching" in done.stderr


def test_not_root_is_told_what_the_prefetch_needs(recorded, tmp_path):
    mountpoint, pack_path, _ = recorded
    pack = packfile.read(pack_path)
    secret = _image_files(pack, mountpoint)[0].path
    mode = os.stat(secret).st_mode
    # Where user nobody can read the pack and reach the files.
    copy = os.path.join(mountpoint, "copy.pack")
    packfile.write(pack, copy)
    os.chmod(copy, 0o644)
    os.chmod(os.path.dirname(mountpoint), 0o755)
    os.chmod(secret, 0o600)
    try:
        done = subprocess.run([SYSTEM_PYTHON, PAGETRACE, "launch", "--mode", "none",
                               str(copy), "--", "true"], capture_output=True,
                              text=True, user=65534, group=65534, extra_groups=[])
    finally:
        os.chmod(secret, mode)
        os.unlink(copy)
    assert done.returncode == 0, done.stderr
    assert f"1 not readable by uid 65534 ({secret})" in done.stderr
    assert "run pagetrace launch as root or as the files' owner" in done.stderr


def test_refine_adds_what_the_launch_read_itself(recorded, tmp_path):
    mountpoint, pack_path, _ = recorded
    pack = packfile.read(pack_path)
    files = _image_files(pack, mountpoint)
    # A pack that lost one file: the refined pack has it back.
    dropped = files[5]
    index = pack.files.index(dropped)
    keep = [i for i in range(len(pack.files)) if i != index]
    renumber = {old: new for new, old in enumerate(keep)}
    partial = pack._replace(files=[pack.files[i] for i in keep], ranges=[
        r._replace(file=renumber[r.file]) for r in pack.ranges if r.file != index])
    path = tmp_path / "partial.pack"
    packfile.write(partial, str(path))
    _evict(pack, mountpoint)
    done = pagetrace("launch", "--refine", str(path), "--", APP, f"{mountpoint}/app")
    assert done.returncode == 0, done.stderr
    refined = packfile.read(str(path))
    assert refined.runs == pack.runs + 1
    assert dropped.path in [f.path for f in refined.files]
    entry = next(f for f in refined.files if f.path == dropped.path)
    assert _expected_pages(refined, entry) >= _expected_pages(pack, dropped)


def test_pack_without_root_or_access_records(tmp_path):
    v1 = tmp_path / "v1.log"
    v1.write_text("# pagetrace-format: 1\n# page-size: 4096\n1 /etc/hostname 0\n")
    done = pagetrace("pack", "--from", str(v1), "-o", str(tmp_path / "x.pack"))
    assert done.returncode == 1
    assert done.stderr == (f"pagetrace pack: {v1}: no access records (format version 1): "
                           "record it with trace --used\n")
    done = subprocess.run([SYSTEM_PYTHON, PAGETRACE, "pack", "--", "true"],
                          capture_output=True, text=True, user=65534, group=65534,
                          extra_groups=[])
    assert done.returncode == 1
    assert "recording needs root" in done.stderr


def test_startup_bench_launched_states(recorded, tmp_path):
    mountpoint, pack_path, out = recorded
    csv = tmp_path / "runs.csv"
    done = subprocess.run(
        [sys.executable, os.path.join(REPO, "scripts", "startup-bench"),
         "--trace", str(out / "runs" / "run-1.log"), "--pack", pack_path, "-n", "2",
         "--states", "selective,launched,launched-stale", "--csv", str(csv),
         "--", APP, f"{mountpoint}/app"], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    rows = csv.read_text().splitlines()[1:]
    assert sorted(r.split(",")[1] for r in rows) == [
        "launched", "launched", "launched-stale", "launched-stale",
        "selective", "selective"]
    refused = subprocess.run(
        [sys.executable, os.path.join(REPO, "scripts", "startup-bench"),
         "--trace", str(out / "runs" / "run-1.log"), "-n", "1",
         "--states", "launched", "--", "true"], capture_output=True, text=True)
    assert refused.returncode == 1
    assert "state launched refused: needs a pack: give --pack PACK" in refused.stderr


# ---------------------------------------------------------------------------
# Lists for image builders, checked against the schemas they document.

def _check_nydus_schema(document):
    """The prefetch file nydus-image's optimizer reads (nydus-builder,
    optimize_prefetch.rs, generate_prefetch_file_info): an object with
    "version" equal to "v1" and "files", a list of objects with an
    absolute "path" (a string) and "ranges", null or a list of [offset,
    size] pairs of unsigned 64-bit integers; no other keys are read."""
    assert set(document) == {"version", "files"}
    assert document["version"] == "v1"
    for entry in document["files"]:
        assert set(entry) <= {"path", "ranges"}
        assert isinstance(entry["path"], str) and entry["path"].startswith("/")
        for pair in entry["ranges"]:
            assert len(pair) == 2
            assert all(isinstance(v, int) and 0 <= v < 2 ** 64 for v in pair)


@pytest.mark.unit
def test_export_nydus_prefetch(tmp_path):
    out = tmp_path / "prefetch.json"
    done = pagetrace("export", os.path.join(SAMPLES, "basic.pack"),
                     "--format", "nydus-prefetch", "-o", str(out))
    assert done.returncode == 0, done.stderr
    document = json.loads(out.read_text())
    _check_nydus_schema(document)
    # libapp.so pages 0-1 and 2, merged and clamped to its 10,000 bytes.
    assert document == {"version": "v1", "files": [
        {"path": "/usr/lib/libapp.so", "ranges": [[0, 10000]]},
        {"path": "/srv/my data/a\nb", "ranges": [[0, 4096]]}]}
    rooted = packexport.nydus_prefetch(packfile.read(os.path.join(SAMPLES, "basic.pack")),
                                       root="/usr")
    assert rooted["files"] == [{"path": "/lib/libapp.so", "ranges": [[0, 10000]]}]


@pytest.mark.unit
def test_export_with_layer_directories_as_roots(tmp_path):
    """--root given twice, or colon-separated as overlay's lowerdir: each
    file relative to the first root that holds it; a root is a directory,
    not a prefix (/sr is not /srv's root)."""
    pack = os.path.join(SAMPLES, "basic.pack")
    for roots in (["--root", "/sr", "--root", "/srv/my data:/usr/lib"],
                  ["--root", "/sr:/srv/my data:/usr/lib"]):
        done = pagetrace("export", pack, "--format", "nydus-prefetch", *roots)
        assert done.returncode == 0, done.stderr
        assert json.loads(done.stdout)["files"] == [
            {"path": "/libapp.so", "ranges": [[0, 10000]]},
            {"path": "/a\nb", "ranges": [[0, 4096]]}]


@pytest.mark.unit
def test_export_file_list():
    done = pagetrace("export", os.path.join(SAMPLES, "basic.pack"), "--format",
                     "file-list")
    assert done.returncode == 0
    # One path a line, in first-access order; a name with a newline cannot
    # be a line, and is named on stderr.
    assert done.stdout == "/usr/lib/libapp.so\n"
    assert "a name with a newline cannot be one line" in done.stderr
    bad = pagetrace("export", os.path.join(SAMPLES, "bad-checksum.pack"),
                    "--format", "file-list")
    assert bad.returncode == 1 and "checksum mismatch" in bad.stderr


@pytest.mark.unit
def test_systemd_unit_example_verifies(tmp_path):
    unit = os.path.join(REPO, "docs", "examples", "pagetrace-launch-example.service")
    with open(unit) as f:
        text = f.read()
    # The C launcher itself, as make install puts it: no interpreter first.
    assert "ExecStart=@BINDIR@/pagetrace-launch " in text
    installed = tmp_path / "bin"
    installed.mkdir()
    (installed / "pagetrace-launch").symlink_to(os.path.join(REPO, "launch", "launch"))
    for bindir, status in ((str(installed), 0), ("/nonexistent-22", 1)):
        copy = tmp_path / "pagetrace-launch-example.service"
        copy.write_text(text.replace("@BINDIR@", bindir))
        done = subprocess.run(["systemd-analyze", "verify", str(copy)],
                              capture_output=True, text=True)
        assert done.returncode == status, done.stderr


# ---------------------------------------------------------------------------
# read_ahead_kb is written back on every exit path; the packs directory.

@pytest.mark.unit
def test_a_run_that_lost_events_is_recorded_again(tmp_path, monkeypatch):
    """trace's status 3 (the command succeeded, events were lost) records
    the run again, up to LOST_RETRIES times; then the pack gives up."""
    monkeypatch.setattr(packrecord, "DROP_CACHES", str(tmp_path / "drop_caches"))
    calls = tmp_path / "calls"
    tracer = tmp_path / "fake-trace"
    # Loses events in its first LOSSES calls, then records.
    tracer.write_text("#!/bin/sh\n"
                      f"n=$(($(cat {calls} 2>/dev/null || echo 0) + 1)); echo $n > {calls}\n"
                      'while [ "$1" != -o ]; do shift; done; echo trace > "$2"\n'
                      '[ $n -le "$LOSSES" ] && exit 3; exit 0\n')
    tracer.chmod(0o755)
    for losses, runs_ok in ((2, True), (3, False)):
        calls.unlink(missing_ok=True)
        monkeypatch.setenv("LOSSES", str(losses))
        if runs_ok:
            paths = packrecord.record_runs(["true"], 2, str(tmp_path), str(tracer), quiet=True)
            assert len(paths) == 2 and calls.read_text().strip() == "4"
        else:
            with pytest.raises(packrecord.PackRecordError, match="events lost in 3 recordings"):
                packrecord.record_runs(["true"], 2, str(tmp_path), str(tracer), quiet=True)
            assert calls.read_text().strip() == "3"


@pytest.mark.unit
def test_read_ahead_restored_on_error_and_sigterm(tmp_path):
    knob, journal = tmp_path / "read_ahead_kb", tmp_path / "journal.json"
    knob.write_text("8192\n")
    with pytest.raises(RuntimeError):
        with packrecord.read_ahead_set(0, [str(knob)], str(journal)):
            assert knob.read_text() == "0\n"
            assert json.loads(journal.read_text()) == {str(knob): "8192"}
            raise RuntimeError("a run failed")
    assert knob.read_text() == "8192\n" and not journal.exists()
    # SIGTERM while the setting is 0: the process ends, the value is back.
    script = (f"import os, signal, sys; sys.path.insert(0, {os.path.join(REPO, 'analysis')!r})\n"
              "from pagetrace.tools import packrecord\n"
              f"with packrecord.read_ahead_set(0, [{str(knob)!r}], {str(journal)!r}):\n"
              "    os.kill(os.getpid(), signal.SIGTERM)\n"
              "    signal.pause()\n")
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
    assert done.returncode != 0
    assert knob.read_text() == "8192\n" and not journal.exists()
    # A SIGKILL leaves the journal: --restore-read-ahead puts the value back.
    journal.write_text(json.dumps({str(knob): "4096"}))
    knob.write_text("0\n")
    assert packrecord.restore_read_ahead(str(journal)) == [str(knob)]
    assert knob.read_text() == "4096\n" and not journal.exists()


KILLED_PACK = """
import sys; sys.path.insert(0, sys.argv[1])
from pagetrace.tools import packrecord
packrecord.DROP_CACHES = sys.argv[4]
target = ("--cgroup", "/sys/fs/cgroup/none") if sys.argv[5] == "target" else ()
packrecord.record_runs(["true"], 1, sys.argv[2], sys.argv[3], True, target, daemons=())
"""


def _ended(pid):
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] == "Z"
    except FileNotFoundError:
        return True


@pytest.mark.unit
@pytest.mark.parametrize("mode", ["command", "target"])
def test_a_pack_killed_by_sigkill_leaves_no_trace_running(tmp_path, mode):
    """The traces a pack starts (the command's; a target's and its
    starter's) end when the pack dies of SIGKILL, which no handler sees."""
    pids = tmp_path / "pids"
    tracer = tmp_path / "fake-trace"
    tracer.write_text("#!/bin/sh\n"
                      f"echo $$ >> {pids}\n"
                      f"echo '{packruntime.TRACE_READY}' >&2\n"
                      "exec sleep 60\n")
    tracer.chmod(0o755)
    pack = subprocess.Popen([sys.executable, "-c", KILLED_PACK, os.path.join(REPO, "analysis"),
                             str(tmp_path), str(tracer), str(tmp_path / "drop_caches"), mode])
    wanted = 2 if mode == "target" else 1
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and (
            not pids.exists() or len(pids.read_text().split()) < wanted):
        time.sleep(0.05)
    started = pids.read_text().split()
    assert len(started) == wanted, started
    pack.kill()
    pack.wait()
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and not all(map(_ended, started)):
        time.sleep(0.05)
    left = [p for p in started if not _ended(p)]
    for pid in left:
        os.kill(int(pid), signal.SIGKILL)
    assert left == [], "traces left running after the pack's SIGKILL"


@pytest.mark.unit
def test_a_failed_starter_ends_the_run_without_waiting_for_its_container(tmp_path, monkeypatch):
    """`docker run` failing (no such image) means no container: the run
    ends at once with the starter's error, not after TARGET_END_S."""
    monkeypatch.setattr(packrecord, "DROP_CACHES", str(tmp_path / "drop_caches"))
    tracer = tmp_path / "fake-trace"
    # The target's trace waits for its container forever; the starter's
    # trace runs a command that fails.
    tracer.write_text("#!/bin/sh\n"
                      f"echo '{packruntime.TRACE_READY}' >&2\n"
                      'case "$*" in *--user*) exit 125 ;; esac\n'
                      "exec sleep 60\n")
    tracer.chmod(0o755)
    started = time.monotonic()
    with pytest.raises(packrecord.PackRecordError, match="exited with status 125"):
        packrecord.record_runs(["docker", "run", "--name", "web", "nonexistent"], 1,
                               str(tmp_path), str(tracer), True,
                               ("--container", "web", "--wait"), daemons=())
    assert time.monotonic() - started < packruntime.STOP_S


def _stand_in_trace(path, pids, target_says, target_then):
    """A stand-in for trace at PATH that notes its pid in PIDS and says it
    is attached; as the starter's trace (--user) it writes an empty trace
    and exits 0; as the target's it says TARGET_SAYS, then runs
    TARGET_THEN (its -o path in $out)."""
    path.write_text("#!/bin/sh\n"
                    f"echo $$ >> {pids}\n"
                    f"echo '{packruntime.TRACE_READY}' >&2\n"
                    'while [ "$1" != -o ]; do shift; done; out=$2\n'
                    'case "$*" in *--user*) printf \'%s\' "$EMPTY" > "$out"; exit 0 ;; esac\n'
                    f"{target_says}\n{target_then}\n")
    path.chmod(0o755)


# The target's trace after its readiness line, when the starter starts no
# container of its name: (what it does, pack's one line).
NOT_FOUND = {
    # It waits on (a command that is not docker, or no cgroup made).
    "waits": ("exec sleep 60", "container web: docker succeeded but started no container "
              f"of that name (none within {packruntime.FOUND_S} s)"),
    # It fails (trace traced another container's cgroup, made while it waited).
    "fails": ("echo 'trace: web: another container (0123456789ab) started while trace "
              "waited, and was traced in its place: trace it again' >&2; exit 1",
              "container web: its trace failed before finding it, after docker succeeded: "
              "web: another container (0123456789ab) started while trace waited, and was "
              "traced in its place: trace it again"),
}


@pytest.mark.unit
@pytest.mark.parametrize("case", sorted(NOT_FOUND))
def test_a_starter_that_starts_no_such_container_ends_the_run_at_once(tmp_path, monkeypatch,
                                                                      case):
    """`docker run --name other` for `--container web` succeeds but starts
    no container called web: the target's trace never says it found it,
    and the run ends at most FOUND_S s after the starter, with one line
    naming the container and the starter, not after TARGET_END_S; no trace
    is left."""
    monkeypatch.setattr(packrecord, "DROP_CACHES", str(tmp_path / "drop_caches"))
    # Past the bound below, shorter than the stand-in's life: a run that
    # waits for the container fails in 40 s, not 600.
    monkeypatch.setattr(packruntime, "TARGET_END_S", 40)
    pids, tracer = tmp_path / "pids", tmp_path / "fake-trace"
    target_does, line = NOT_FOUND[case]
    _stand_in_trace(tracer, pids, ":", target_does)
    started = time.monotonic()
    with pytest.raises(packrecord.PackRecordError) as raised:
        packrecord.record_runs(["docker", "run", "-d", "--name", "other", "IMAGE"], 1,
                               str(tmp_path), str(tracer), True,
                               ("--container", "web", "--wait"), daemons=())
    assert time.monotonic() - started < 30
    assert str(raised.value) == line
    left = [p for p in pids.read_text().split() if not _ended(p)]
    assert len(pids.read_text().split()) == 2 and left == [], "traces left running"


@pytest.mark.unit
def test_a_container_found_is_waited_for_past_the_grace(tmp_path, monkeypatch):
    """The target's trace says it found its container (at once, with its
    readiness line) and ends 3 s later, when the container exits: past
    FOUND_S, the run is recorded, not cut short."""
    monkeypatch.setattr(packrecord, "DROP_CACHES", str(tmp_path / "drop_caches"))
    monkeypatch.setattr(packruntime, "FOUND_S", 1)
    monkeypatch.setenv("EMPTY", tracewriter.header(PAGE, (), ("read", "access", "map"),
                                                   {"command": "x"})
                       + tracewriter.trailer(0, PAGE, 0, 0, 0, 0, 0))
    pids, tracer = tmp_path / "pids", tmp_path / "fake-trace"
    _stand_in_trace(tracer, pids, "echo 'trace: Tracing container web.' >&2",
                    'sleep 3; printf \'%s\' "$EMPTY" > "$out"')
    started = time.monotonic()
    paths = packrecord.record_runs(["docker", "run", "--name", "web", "IMAGE"], 1,
                                   str(tmp_path), str(tracer), True,
                                   ("--container", "web", "--wait"), daemons=())
    assert time.monotonic() - started >= 3
    assert paths == [str(tmp_path / "run-1.log")] and os.path.exists(paths[0])


def _recording(knob, journal):
    """A process in read_ahead_set(0, [KNOB], JOURNAL): prints the values
    it saved once inside, and leaves when a line comes on its stdin."""
    script = (f"import json, sys; sys.path.insert(0, {os.path.join(REPO, 'analysis')!r})\n"
              "from pagetrace.tools import packrecord\n"
              f"with packrecord.read_ahead_set(0, [{str(knob)!r}], {str(journal)!r}) as saved:\n"
              "    print(json.dumps(saved), flush=True)\n"
              "    sys.stdin.readline()\n")
    return subprocess.Popen([sys.executable, "-c", script], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _inside(proc, timeout):
    """The values PROC saved, once it is inside; None if not in TIMEOUT s."""
    if not select.select([proc.stdout], [], [], timeout)[0]:
        return None
    return json.loads(proc.stdout.readline())


def _first_recording(tmp_path):
    """A knob at 8192, its journal, and a recording inside that saved it."""
    knob, journal = tmp_path / "read_ahead_kb", tmp_path / "journal.json"
    knob.write_text("8192\n")
    first = _recording(knob, journal)
    assert _inside(first, 30) == {str(knob): "8192"}
    return knob, journal, first


@pytest.mark.unit
def test_a_killed_recordings_read_ahead_is_put_back_before_the_next_reads_it(tmp_path):
    knob, journal, killed = _first_recording(tmp_path)
    killed.kill()
    killed.wait()
    assert knob.read_text() == "0\n" and journal.exists()
    with packrecord.read_ahead_set(0, [str(knob)], str(journal)) as saved:
        assert saved == {str(knob): "8192"} and knob.read_text() == "0\n"
    assert knob.read_text() == "8192\n" and not journal.exists()


@pytest.mark.unit
def test_two_recordings_take_turns_and_the_first_value_comes_back(tmp_path):
    knob, journal, first = _first_recording(tmp_path)
    second = _recording(knob, journal)
    try:
        assert _inside(second, 1.0) is None, "the second recording did not wait"
        with pytest.raises(packrecord.PackRecordError, match="a recording is running"):
            packrecord.restore_read_ahead(str(journal))
        first.communicate("\n", timeout=30)
        assert first.returncode == 0
        assert _inside(second, 30) == {str(knob): "8192"}
        assert "waiting for another recording" in second.stderr.readline()
        second.communicate("\n", timeout=30)
        assert second.returncode == 0
    finally:
        for proc in (first, second):
            proc.kill()
            proc.wait()
    assert knob.read_text() == "8192\n" and not journal.exists()


@pytest.mark.unit
def test_packs_directory_one_pack_per_command(tmp_path):
    a = ["/usr/bin/app", "--one"]
    b = ["/usr/bin/app", "--two"]
    assert packfile.pack_name(a) != packfile.pack_name(b)
    assert packfile.pack_name(a).startswith("app-") and packfile.pack_name(a).endswith(".pack")
    env = dict(os.environ, PAGETRACE_PACKS=str(tmp_path))
    pack = packfile.read(os.path.join(SAMPLES, "basic.pack"))
    name = packfile.pack_name(["true"])
    packfile.write(pack._replace(created=int(time.time())), str(tmp_path / name))
    # launch NAME finds NAME.pack in the packs directory (its files are
    # not here: the one line names them).
    done = pagetrace("launch", name[:-len(".pack")], "--", "true", env=env)
    assert done.returncode == 0
    assert done.stderr.startswith("pagetrace launch: 2 of 2 files not prefetched")


@pytest.mark.unit
def test_sorted_plan_fills_a_gap_only_where_a_request_costs_more():
    """Pages 0-1, 4-5 and 1000 of one file: under 150 IOPS and 150 MB/s
    the 2-page gap is worth filling (a request is 6.7 ms, 8 KiB 0.05 ms),
    the 994-page one is not (4 MB: 27 ms)."""
    pack = packfile.Pack(1, 4096, 0, "x", 1, 0,
                         [packfile.PackFile("/f", "1:1", 1, 8 << 20, 1, 0)],
                         [packfile.PackRange(0, 0, 2, 0), packfile.PackRange(0, 4, 2, 1),
                          packfile.PackRange(0, 1000, 1, 2)])
    for cap in ((150, 150_000_000),
                # With bytes almost free, filling the 994-page gap too would
                # make one range of 1,001 pages, 4 requests of 1 MiB: more
                # than the 2 of filling the small gap only.
                (3000, 10 ** 12)):
        gap, largest = launch_plan.sorted_plan(pack, [0], *cap)
        assert 2 <= gap < 994 and largest == 256
        assert launch_plan.plan_ranges(pack, [0], gap, merge=True) == [("/f", 0, 6), ("/f", 1000, 1)]


@pytest.mark.unit
def test_prefetch_is_worth_it_only_well_below_the_cold_reads():
    """100 files of one used page each: the prefetch needs a read per file,
    as the start does: not worth paying before it. One file of 100 pages
    one in 16: the prefetch fills the gaps and reads 7 MiB in 7 requests,
    where the start without readahead reads 100 times."""
    many = packfile.Pack(1, 4096, 0, "x", 1, 0,
                         [packfile.PackFile(f"/f{i}", "1:1", 1, 4096, 1, 0) for i in range(100)],
                         [packfile.PackRange(i, 0, 1, i) for i in range(100)])
    keep = list(range(100))
    assert launch_plan.plan_cost(many, keep, 256, 256, 150, 150_000_000)[1] == 100
    assert launch_plan.cold_cost(many, keep, 150, 150_000_000, 2048) == pytest.approx(100 / 150)
    one = packfile.Pack(1, 4096, 0, "x", 1, 0,
                        [packfile.PackFile("/f", "1:1", 1, 8 << 20, 1, 0)],
                        [packfile.PackRange(0, 16 * i, 1, i) for i in range(100)])
    gap, largest = launch_plan.sorted_plan(one, [0], 150, 150_000_000)
    estimate, requests, pages = launch_plan.plan_cost(one, [0], gap, largest, 150, 150_000_000)
    assert (requests, pages) == (7, 1585)
    assert launch_plan.cold_cost(one, [0], 150, 150_000_000, 0) == pytest.approx(100 / 150)
    assert estimate <= launch.WORTH_IT * launch_plan.cold_cost(one, [0], 150, 150_000_000, 0)


@pytest.mark.unit
def test_planned_requests_come_in_first_access_order():
    """launch --mode planned: the sorted plan's requests (gaps filled,
    cut at `largest` pages), each placed where the pack first uses a page
    of it; a request of filled gap only follows the one before it."""
    from pagetrace.tools import launch_prefetch
    pack = packfile.Pack(1, 4096, 0, "x", 1, 0,
                         [packfile.PackFile("/a", "1:1", 1, 8 << 20, 1, 0),
                          packfile.PackFile("/b", "1:1", 2, 8 << 20, 1, 0)],
                         [packfile.PackRange(0, 100, 2, 0),   # a: 100-101
                          packfile.PackRange(1, 0, 1, 1),     # b: 0
                          packfile.PackRange(0, 0, 3, 2),     # a: 0-2
                          packfile.PackRange(0, 104, 1, 3),   # a: 104, gap 2
                          packfile.PackRange(1, 50, 1, 4),    # b: 50, gap 49
                          packfile.PackRange(0, 1, 1, 5),     # a: 1 again
                          packfile.PackRange(0, 20, 1, 6)])   # a: 20, gap 17
    assert launch_prefetch.first_access_plan(pack, [0, 1], 4, 256) == [
        (0, 100, 5), (1, 0, 1), (0, 0, 3), (1, 50, 1), (0, 20, 1)]
    # Gaps of up to 20 filled, requests of 8 pages: a 0-20 is cut in three;
    # 8-15 holds no range's start and follows 0-7; 16-20 holds 20's.
    assert launch_prefetch.first_access_plan(pack, [0, 1], 20, 8) == [
        (0, 100, 5), (1, 0, 1), (0, 0, 8), (0, 8, 8), (1, 50, 1), (0, 16, 5)]
    # File b left out.
    assert launch_prefetch.first_access_plan(pack, [0], 0, 256) == [
        (0, 100, 2), (0, 0, 3), (0, 104, 1), (0, 20, 1)]


# ---------------------------------------------------------------------------
# The C reader (lib/packfile.c, through launch/.output/packfile-dump) holds
# to the same samples, and agrees with the Python reader on packs the
# samples did not pick.

PACK_DUMP = os.path.join(REPO, "launch", ".output", "packfile-dump")


def _c_read(path):
    """({"pack": ...} or {"refused": reason}, exit status) of the C reader."""
    done = subprocess.run([PACK_DUMP, str(path)], capture_output=True, text=True)
    return json.loads(done.stdout), done.returncode


@pytest.mark.unit
@pytest.mark.parametrize("name", sorted(os.path.basename(p)[:-5] for p in
                                        glob.glob(os.path.join(SAMPLES, "*.pack"))))
def test_pack_conformance_c_reader(name):
    assert os.access(PACK_DUMP, os.X_OK), "make builds launch/.output/packfile-dump"
    with open(os.path.join(SAMPLES, name + ".expect.json")) as f:
        expected = json.load(f)
    got, status = _c_read(os.path.join(SAMPLES, name + ".pack"))
    assert got == expected
    assert status == (1 if "refused" in expected else 0)


def _python_read(path):
    try:
        return {"pack": packfile.as_json(packfile.read(str(path)))}
    except packfile.PackError as err:
        return {"refused": err.reason}


# Bytes a mutation writes: the format's own (digits, separators, escapes,
# hex) and a few others. No quote (Python's repr would switch quotes) and
# no byte above 0x7f (the readers' JSON differ only in how they spell it).
MUTATION_BYTES = b"0123456789 :=#/\\\nabcdefxyz-rfg"


def _mutant(data, rng):
    """`data` with 1-3 random edits (a byte replaced, inserted or deleted;
    a line dropped or doubled), re-signed with a right checksum most of the
    time, so that the line and field rules are reached, not only the
    checksum."""
    body = bytearray(data[:data.rfind(b"# crc32: ")])
    for _ in range(rng.randint(1, 3)):
        at = rng.randrange(len(body) + 1)
        edit = rng.choice(("replace", "insert", "delete", "drop line", "double line"))
        if edit == "replace" and at < len(body):
            body[at] = rng.choice(MUTATION_BYTES)
        elif edit == "insert":
            body[at:at] = bytes([rng.choice(MUTATION_BYTES)])
        elif edit == "delete" and at < len(body):
            del body[at]
        else:
            lines = bytes(body).split(b"\n")
            k = rng.randrange(len(lines))
            lines[k:k + 1] = [] if edit == "drop line" else [lines[k], lines[k]]
            body = bytearray(b"\n".join(lines))
    crc = zlib.crc32(bytes(body)) & 0xFFFFFFFF
    if rng.random() < 0.1:
        crc ^= 1 << rng.randrange(32)
    return bytes(body) + b"# crc32: %08x\n" % crc


@pytest.mark.unit
@pytest.mark.parametrize("edit, reason", [
    ((b"file 7:3 12 ", b"file 7:3 18446744073709551615 "), None),
    ((b"file 7:3 12 ", b"file 7:3 18446744073709551616 "),
     "line 9: ino is not an unsigned 64-bit integer: '18446744073709551616'"),
    ((b"file 7:3 ", b"file 4294967295:3 "), None),
    ((b"file 7:3 ", b"file 4294967296:3 "), "line 9: device '4294967296:3' is not MAJ:MIN"),
    ((b"file 7:3 ", b"file 07:003 "), None),
    ((b"7:3=4100", b"7:3=18446744073709551616"),
     "request-us: '7:3=18446744073709551616' is not MAJ:MIN=US"),
])
def test_readers_agree_on_numbers_at_their_limits(tmp_path, edit, reason):
    """Numbers below 2^64 and device numbers below 2^32 are read, the next
    ones refused, by both readers alike; `07:003` is device 7:3."""
    data = open(os.path.join(SAMPLES, "basic.pack"), "rb").read()
    body = data[:data.rfind(b"# crc32: ")].replace(*edit)
    path = tmp_path / "limits.pack"
    path.write_bytes(body + b"# crc32: %08x\n" % (zlib.crc32(body) & 0xFFFFFFFF))
    python, (c, _) = _python_read(path), _c_read(path)
    assert c == python
    if reason:
        assert python == {"refused": reason}
    else:
        assert "pack" in python and python["pack"]["files"][1]["dev"] in ("7:3", "4294967295:3")


@pytest.mark.unit
def test_c_and_python_readers_agree_on_random_packs(tmp_path):
    """2,000 mutants of the valid samples (seeded): the C reader refuses
    each pack the Python reader refuses, for the same reason in the same
    words, and reads the others to the same pack."""
    rng = random.Random(22)
    sources = [open(os.path.join(SAMPLES, n), "rb").read()
               for n in ("basic.pack", "no-ranges.pack")]
    path = tmp_path / "m.pack"
    kinds = collections.Counter()
    for i in range(2000):
        path.write_bytes(_mutant(rng.choice(sources), rng))
        python, (c, _) = _python_read(path), _c_read(path)
        assert c == python, (i, path.read_bytes())
        kinds["read" if "pack" in python else python["refused"].split(":")[0][:12]] += 1
    # The mutants reach the reading and the refusing alike.
    assert kinds["read"] >= 100 and len(kinds) >= 10, kinds
