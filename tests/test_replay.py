"""replay/replay on real files, as root: files deliberately fragmented on a
small loop-mounted ext4 image (checked against filefrag -v), page-cache
residency through mincore(2), every bad input of issue 3, read-only-ness.
"""
import csv
import json
import os
import pathlib
import pty
import random
import re
import select
import subprocess
import time

import pytest

import loopimg

TOP = pathlib.Path(__file__).resolve().parent.parent
REPLAY = TOP / "replay" / "replay"
PAGE = 4096
JSON_KEYS = ["tool", "format", "trace", "order", "mode", "grouped",
             "max_request_bytes", "queue_depth", "requests", "pages", "bytes",
             "files", "elapsed_s", "mib_per_s", "mean_request_bytes", "seeks",
             "seek_distance_bytes", "skipped", "used", "trace_records",
             "unused_pages", "throttle", "cgroup"]
SKIP_KEYS = ["missing", "not_regular", "short_file", "malformed",
             "bad_offset", "special_path", "odirect_refused", "io_error",
             "not_readable"]

@pytest.fixture(scope="module", autouse=True)
def built():
    loopimg.require_root()
    subprocess.run(["make", "-s", "-C", str(TOP / "replay")], check=True)


class Files:
    """Paths of the test files on the image."""


@pytest.fixture(scope="module")
def fs():
    with loopimg.loop_mount("ext4", 64, ("-q", "-F", "-b", "4096")) as (
            mnt, loop):
        f = Files()
        f.mnt, f.loop = mnt, loop
        os.mkdir(os.path.join(mnt, "frag"))
        f.a = os.path.join(mnt, "frag", "a")
        f.b = os.path.join(mnt, "frag", "b")
        loopimg.make_fragmented([f.a, f.b])
        f.tail = os.path.join(mnt, "tail")          # last block partial
        loopimg.write_file(f.tail, 10000, seed=2)
        f.plain = os.path.join(mnt, "plain")
        loopimg.write_file(f.plain, 1 << 20, seed=3)
        f.odd = os.path.join(mnt, "we ird,na\nme\\")
        loopimg.write_file(f.odd, 8192, seed=4)
        f.dir = os.path.join(mnt, "dir")
        os.mkdir(f.dir)
        f.fifo = os.path.join(mnt, "fifo")
        os.mkfifo(f.fifo)
        f.loop1 = os.path.join(mnt, "loop1")
        os.symlink("loop2", f.loop1)
        os.symlink("loop1", os.path.join(mnt, "loop2"))
        f.regular = [f.a, f.b, f.tail, f.plain, f.odd]
        yield f


def escape(path):
    """PATH escaped as in the trace format, as a latin-1 str (one char per
    byte)."""
    return "".join(f"\\{b:03o}" if b <= 0x20 or b in (0x5c, 0x7f)
                   else chr(b) for b in os.fsencode(path))


def trace_text(pages, header=True, step_us=10):
    """A v1 trace of PAGES, [(path, offset)] or [(path, offset, ts)]."""
    lines = ["# pagetrace-format: 1", "# page-size: 4096"] if header else []
    for i, page in enumerate(pages):
        ts = page[2] if len(page) > 2 else 1_700_000_000_000_000 + i * step_us
        lines.append(f"{ts} {escape(page[0])} {page[1]}")
    return "\n".join(lines) + "\n"


def trace_v2(records, kinds="read access map"):
    """A version 2 trace of RECORDS, [(path, offset, kind)], in order."""
    lines = ["# pagetrace-format: 2", "# page-size: 4096",
             "# columns: timestamp_us path offset kind",
             f"# records: {kinds}"]
    for i, (path, offset, kind) in enumerate(records):
        lines.append(f"{1_700_000_000_000_000 + i * 10} {escape(path)} "
                     f"{offset} {kind}")
    return "\n".join(lines) + "\n"


def run_replay(args, text, tmp_path, timeout=60, env=None):
    trace = tmp_path / "trace.log"
    trace.write_bytes(text.encode("latin-1"))
    return subprocess.run([str(REPLAY), *args, str(trace)],
                          capture_output=True, text=True, timeout=timeout,
                          env=env, errors="surrogateescape")


def run_json(args, text, tmp_path, **kw):
    result = run_replay(["--json", *args], text, tmp_path, **kw)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout), result.stderr


def unescape(field):
    return os.fsdecode(re.sub(rb"\\([0-3][0-7][0-7])",
                              lambda m: bytes([int(m.group(1), 8)]),
                              field.encode("latin-1")))


def plan(args, text, tmp_path):
    result = run_replay(["--plan", *args], text, tmp_path)
    assert result.returncode == 0, result.stderr
    rows = list(csv.reader(result.stdout.splitlines()))
    assert rows[0] == ["order", "path", "offset", "length", "dev",
                       "physical_offset"]
    assert [int(r[0]) for r in rows[1:]] == list(range(len(rows) - 1))
    return [(unescape(r[1]), int(r[2]), int(r[3]),
             int(r[5]) if r[5] else None) for r in rows[1:]]


def all_pages(*paths):
    return [(p, off) for p in paths
            for off in range(0, os.path.getsize(p), PAGE)]


def expected_disk_order(paths, max_request):
    """Every byte of PATHS in physical order from filefrag -v: extents
    sorted by position, runs contiguous in the file and on disk merged,
    then cut at MAX_REQUEST."""
    pieces = sorted((phys, p, logical, length)
                    for p in paths
                    for logical, phys, length in loopimg.filefrag_extents(p))
    runs = []
    for phys, p, logical, length in pieces:
        if runs:
            rp, rl, rlen, rphys = runs[-1]
            if rp == p and rl + rlen == logical and rphys + rlen == phys:
                runs[-1] = (rp, rl, rlen + length, rphys)
                continue
        runs.append((p, logical, length, phys))
    requests = []
    for p, logical, length, phys in runs:
        for start in range(0, length, max_request):
            requests.append((p, logical + start,
                             min(max_request, length - start), phys + start))
    return requests


def expected_seeks(rows):
    seeks = distance = 0
    for prev, row in zip(rows, rows[1:]):
        if row[3] != prev[3] + prev[2]:
            seeks += 1
            distance += abs(row[3] - (prev[3] + prev[2]))
    return seeks, distance


# --- grouping and ordering against filefrag -v ---------------------------

def test_files_really_are_fragmented(fs):
    for path in (fs.a, fs.b):
        assert len(loopimg.filefrag_extents(path)) >= 4


def test_original_order_grouping_and_physical_offsets(fs, tmp_path):
    a, b = fs.a, fs.b
    pages = ([(a, i * PAGE) for i in range(10)] +
             [(b, i * PAGE) for i in range(10)] +
             [(a, i * PAGE) for i in range(10, 20)] +
             [(a, 30 * PAGE), (a, 29 * PAGE), (b, 10 * PAGE)])
    rows = plan([], trace_text(pages), tmp_path)
    ext = {p: loopimg.filefrag_extents(p) for p in (a, b)}
    expected = [(a, 0, 40960), (b, 0, 40960), (a, 40960, 40960),
                (a, 122880, 4096), (a, 118784, 4096), (b, 40960, 4096)]
    assert rows == [(p, off, length, loopimg.physical_of(ext[p], off))
                    for p, off, length in expected]


def test_max_request_cuts_groups(fs, tmp_path):
    rows = plan(["--max-request", "12k"],
                trace_text(all_pages(fs.a)[:10]), tmp_path)
    assert [(off, length) for _, off, length, _ in rows] == [
        (0, 12288), (12288, 12288), (24576, 12288), (36864, 4096)]


@pytest.mark.parametrize("shuffled", [False, True])
@pytest.mark.parametrize("max_request", [1 << 20, 32768])
def test_sorted_plan_matches_filefrag(fs, tmp_path, shuffled, max_request):
    pages = all_pages(fs.a, fs.b)
    if shuffled:
        random.Random(7).shuffle(pages)
    rows = plan(["--sorted", "--max-request", str(max_request)],
                trace_text(pages), tmp_path)
    assert rows == expected_disk_order([fs.a, fs.b], max_request)


def test_sorted_reads_pages_traced_twice_once(fs, tmp_path):
    pages = all_pages(fs.a)
    pages = pages + pages[5:20]
    rows = plan(["--sorted"], trace_text(pages), tmp_path)
    assert rows == expected_disk_order([fs.a], 1 << 20)
    result, _ = run_json(["--sorted"], trace_text(pages), tmp_path)
    assert result["bytes"] == os.path.getsize(fs.a)


def test_sorted_no_group_is_pages_in_disk_order(fs, tmp_path):
    pages = all_pages(fs.a, fs.b)
    random.Random(3).shuffle(pages)
    rows = plan(["--sorted", "--no-group"], trace_text(pages), tmp_path)
    ext = {p: loopimg.filefrag_extents(p) for p in (fs.a, fs.b)}
    expected = sorted((p, off, PAGE, loopimg.physical_of(ext[p], off))
                      for p, off in pages)
    assert rows == sorted(expected, key=lambda r: r[3])


def test_sort_file_orders_by_path_and_offset(fs, tmp_path):
    pages = all_pages(fs.b, fs.a)
    random.Random(5).shuffle(pages)
    rows = plan(["--sort=file", "--max-request", "64k"], trace_text(pages),
                tmp_path)
    ext = {p: loopimg.filefrag_extents(p) for p in (fs.a, fs.b)}
    assert rows == [(p, off, 65536, loopimg.physical_of(ext[p], off))
                    for p in (fs.a, fs.b) for off in (0, 65536, 131072)]


def test_max_request_below_page_size_is_a_usage_error(fs, tmp_path):
    result = run_replay(["--max-request", "1000"],
                        trace_text([(fs.plain, 0)]), tmp_path)
    assert result.returncode == 2
    assert "smaller than the trace's page size 4096" in result.stderr


def test_no_group_one_request_per_page(fs, tmp_path):
    pages = all_pages(fs.a)[:8]
    rows = plan(["--no-group"], trace_text(pages), tmp_path)
    assert [(p, off, length) for p, off, length, _ in rows] == [
        (p, off, PAGE) for p, off in pages]


def test_json_seeks_match_plan(fs, tmp_path):
    pages = all_pages(fs.a, fs.b)
    random.Random(11).shuffle(pages)
    text = trace_text(pages)
    rows = plan(["--sorted"], text, tmp_path)
    result, _ = run_json(["--sorted"], text, tmp_path)
    assert (result["seeks"], result["seek_distance_bytes"]) == \
        expected_seeks(rows)
    assert result["requests"] == len(rows)
    assert result["bytes"] == 2 * os.path.getsize(fs.a)
    assert result["pages"] == 2 * os.path.getsize(fs.a) // PAGE
    assert result["files"] == 2


def test_sorted_needs_fewer_seeks_than_original(fs, tmp_path):
    pages = all_pages(fs.a, fs.b)
    random.Random(13).shuffle(pages)
    original, _ = run_json([], trace_text(pages), tmp_path)
    ordered, _ = run_json(["--sorted"], trace_text(pages), tmp_path)
    assert ordered["seeks"] < original["seeks"]
    assert ordered["seek_distance_bytes"] < original["seek_distance_bytes"]
    assert ordered["bytes"] == original["bytes"]


# --- what gets read ------------------------------------------------------

def traced_subset(fs, seed=17):
    rng = random.Random(seed)
    pages = [p for p in all_pages(fs.a, fs.b) if rng.random() < 0.4]
    pages += [(fs.tail, 0), (fs.tail, 4096), (fs.tail, 8192)]
    rng.shuffle(pages)
    return pages


def residency(paths):
    return {(p, off) for p in paths for off in loopimg.resident_pages(p)}


def test_buffered_reads_every_traced_byte_once(fs, tmp_path):
    pages = traced_subset(fs)
    files = [fs.a, fs.b, fs.tail]
    for p in files:
        loopimg.evict(p)
    assert residency(files) == set()
    result, _ = run_json(["--buffered"], trace_text(pages), tmp_path)
    assert residency(files) == set(pages)
    assert result["mode"] == "buffered"
    # tail is 10000 bytes: its third page holds 10000 - 8192 of them.
    assert result["bytes"] == (len(pages) - 3) * PAGE + 10000


def test_direct_reads_leave_cache_alone_and_evict_empties_it(fs, tmp_path):
    pages = traced_subset(fs, seed=19)
    files = [fs.a, fs.b, fs.tail]
    for p in files:
        with open(p, "rb") as f:
            f.read()
    assert residency(files)
    result, _ = run_json(["--evict"], trace_text(pages), tmp_path)
    assert residency(files) == set()
    assert result["mode"] == "direct"
    assert result["bytes"] == (len(pages) - 3) * PAGE + 10000


def test_direct_read_of_last_partial_block(fs, tmp_path):
    result, _ = run_json(["--no-group"], trace_text(
        [(fs.tail, 8192), (fs.tail, 0), (fs.tail, 4096)]), tmp_path)
    assert (result["requests"], result["bytes"]) == (3, 10000)


def test_direct_reads_on_4k_sector_device(tmp_path):
    # O_DIRECT on a 4096-byte-sector device refuses 512-byte-aligned I/O:
    # the partial last block must be read as one whole 4 KiB block.
    with loopimg.loop_mount("ext4", 32, ("-q", "-F", "-b", "4096"),
                            ("--sector-size", "4096")) as (mnt, loop):
        path = os.path.join(mnt, "tail")
        loopimg.write_file(path, 3 * PAGE + 100, seed=9)
        with open(f"/sys/block/{os.path.basename(loop)}/queue/"
                  "logical_block_size") as f:
            assert f.read().strip() == "4096"
        pages = [(path, off) for off in (3 * PAGE, 0, PAGE, 2 * PAGE)]
        result, _ = run_json(["--no-group"], trace_text(pages), tmp_path)
        assert (result["requests"], result["bytes"]) == (4, 3 * PAGE + 100)
        assert result["skipped"]["odirect_refused"] == 0


def test_more_files_than_the_soft_fd_limit(fs, tmp_path):
    names = []
    os.makedirs(os.path.join(fs.mnt, "many"), exist_ok=True)
    for i in range(300):
        names.append(os.path.join(fs.mnt, "many", f"{i:03}"))
        with open(names[-1], "wb") as f:
            f.write(b"x" * 100)
    trace = tmp_path / "many.log"
    trace.write_text(trace_text([(n, 0) for n in names]))
    result = subprocess.run(["prlimit", "--nofile=64:4096", str(REPLAY),
                             "--json", str(trace)], capture_output=True,
                            text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    out = json.loads(result.stdout)
    assert (out["files"], out["bytes"]) == (300, 300 * 100)


@pytest.mark.parametrize("env", [{}, {"PAGETRACE_NO_CACHESTAT": "1"}],
                         ids=["cachestat", "mincore"])
def test_prefetch_makes_exactly_traced_pages_resident(fs, tmp_path, env):
    pages = traced_subset(fs, seed=23)
    files = [fs.a, fs.b, fs.tail]
    for p in files:
        loopimg.evict(p)
    environ = {**os.environ, **env}
    result, err = run_json(["--sorted", "--prefetch"], trace_text(pages),
                           tmp_path, env=environ)
    assert residency(files) == set(pages)
    assert result["mode"] == "prefetch" and result["requests"] > 0
    assert "0 requests already cached" in err
    again, err = run_json(["--sorted", "--prefetch"], trace_text(pages),
                          tmp_path, env=environ)
    assert again["requests"] == 0
    assert f"{result['requests']} requests already cached" in err


def test_prefetch_skips_only_resident_ranges(fs, tmp_path):
    loopimg.evict(fs.a)
    loopimg.evict(fs.b)
    with open(fs.a, "rb") as f:
        os.posix_fadvise(f.fileno(), 0, 0, os.POSIX_FADV_RANDOM)
        f.read(PAGE)
    pages = [(fs.a, 0), (fs.b, 0)]
    result, err = run_json(["--prefetch", "--no-group"], trace_text(pages),
                           tmp_path)
    assert result["requests"] == 1 and "1 requests already cached" in err
    assert residency([fs.b]) == {(fs.b, 0)}


def test_queue_depth_reads_the_same(fs, tmp_path):
    pages = traced_subset(fs, seed=29)
    one, _ = run_json([], trace_text(pages), tmp_path)
    four, _ = run_json(["--queue-depth", "4"], trace_text(pages), tmp_path)
    assert four["queue_depth"] == 4
    for key in ("requests", "bytes", "pages", "files", "seeks"):
        assert four[key] == one[key]


def test_queue_depth_reads_from_several_threads(fs, tmp_path):
    (tmp_path / "t.log").write_text(trace_text(
        [(fs.plain, off) for off in range(0, 1 << 20, 2 * PAGE)]))
    log = tmp_path / "strace.log"
    subprocess.run(["strace", "-f", "-qq", "-y", "-e", "trace=pread64", "-o",
                    str(log), str(REPLAY), "--queue-depth", "4",
                    # Reads slow enough (about 0.4 s for the 128) that all
                    # four workers start before the first ones drain the
                    # plan: under strace, starting a thread is slow, and
                    # unthrottled two workers once did all the reads.
                    "--throttle", "riops=300",
                    str(tmp_path / "t.log")], capture_output=True,
                   check=True, timeout=60)
    # Only reads of the traced file (-y names fds): the loader preads too.
    # Not the main thread's: the loader's come first, and its reads of the
    # file spend blk-throttle's first slice before the workers start.
    lines = log.read_text().splitlines()
    main = lines[0].split()[0]
    readers = {line.split()[0] for line in lines
               if "pread64(" in line and f"<{fs.plain}>" in line} - {main}
    assert len(readers) == 4


def test_timing_keeps_gaps(fs, tmp_path):
    base = 1_700_000_000_000_000
    pages = [(fs.plain, 0, base), (fs.plain, 8192, base + 150_000),
             (fs.plain, 16384, base + 300_000)]
    timed, _ = run_json(["--timing"], trace_text(pages), tmp_path)
    fast, _ = run_json([], trace_text(pages), tmp_path)
    assert 0.29 <= timed["elapsed_s"] < 1.0
    assert fast["elapsed_s"] < 0.1


def test_stdin_trace(fs):
    text = trace_text(all_pages(fs.plain)[:4])
    result = subprocess.run([str(REPLAY), "--json", "-"], input=text,
                            capture_output=True, text=True, timeout=30)
    assert result.returncode == 0
    assert json.loads(result.stdout)["bytes"] == 4 * PAGE


# --- trace --used (format 2) ---------------------------------------------

def used_trace(fs, seed=31):
    """A v2 trace: reads of a subset of a, b and tail; access records for
    some of them, map records for others; access records for pages that
    were never read (not replayed: they were cached already) and for a
    file with no read at all (plain: never opened). Returns the trace and
    the set of used read pages."""
    rng = random.Random(seed)
    reads = traced_subset(fs, seed)
    records = [(p, off, "read") for p, off in reads]
    used = set()
    for p, off in reads:
        roll = rng.random()
        if roll < 0.35:
            used.add((p, off))
            records.append((p, off, "access"))
        elif roll < 0.5:
            used.add((p, off))
            records.append((p, off, "map"))
    read_set = set(reads)
    unread = [pg for pg in all_pages(fs.a, fs.b) if pg not in read_set][:20]
    records += [(p, off, "access") for p, off in unread]
    records += [(fs.plain, 0, "access"), (fs.plain, PAGE, "map")]
    # A page accessed twice, and accessed before it was read, still counts
    # once.
    first = sorted(used)[0]
    records.insert(0, (first[0], first[1], "access"))
    return trace_v2(records), used, reads


@pytest.mark.parametrize("order", [[], ["--sorted"]], ids=["original",
                                                          "sorted"])
def test_prefetch_used_makes_exactly_used_pages_resident(fs, tmp_path,
                                                         order):
    text, used, reads = used_trace(fs)
    files = [fs.a, fs.b, fs.tail, fs.plain]
    for p in files:
        loopimg.evict(p)
    result, err = run_json(["--prefetch", "--used", *order], text, tmp_path)
    # Ground truth from the kernel: every used page and nothing else,
    # not a page of readahead around them, nothing of plain.
    assert residency(files) == used
    assert result["used"] is True and result["requests"] > 0
    assert result["pages"] == len(used)
    assert result["unused_pages"] == len(reads) - len(used)
    assert result["trace_records"]["read"] == len(reads)
    assert f"--used: {len(used)} read pages used" in err


def test_prefetch_without_used_makes_all_read_pages_resident(fs, tmp_path):
    text, used, reads = used_trace(fs, seed=37)
    files = [fs.a, fs.b, fs.tail, fs.plain]
    for p in files:
        loopimg.evict(p)
    result, err = run_json(["--prefetch", "--sorted"], text, tmp_path)
    assert residency(files) == set(reads)
    assert result["used"] is False and result["unused_pages"] == 0
    kinds = result["trace_records"]
    assert kinds["read"] == len(reads)
    assert kinds["access"] + kinds["map"] > len(used)
    assert f"{kinds['access']} access and {kinds['map']} map records " \
        "ignored" in err


def test_used_sorted_plan_is_the_plan_of_the_used_pages(fs, tmp_path):
    text, used, reads = used_trace(fs, seed=41)
    used_in_trace_order = [pg for pg in reads if pg in used]
    rows = plan(["--sorted", "--used"], text, tmp_path)
    assert rows == plan(["--sorted"], trace_text(used_in_trace_order),
                        tmp_path)
    # On-disk order (filefrag), requests of whole used pages only.
    positions = [phys for _, _, _, phys in rows]
    assert positions == sorted(positions)
    covered = {(p, off + i) for p, off, length, _ in rows
               for i in range(0, length, PAGE)}
    assert covered == used


def test_used_groups_adjacent_used_pages(fs, tmp_path):
    pages = [(fs.plain, i * PAGE) for i in range(8)]
    records = [(p, off, "read") for p, off in pages]
    records += [(fs.plain, i * PAGE, "access") for i in (0, 1, 2, 5, 6)]
    rows = plan(["--used"], trace_v2(records), tmp_path)
    assert [(off, length) for _, off, length, _ in rows] == [
        (0, 3 * PAGE), (5 * PAGE, 2 * PAGE)]


def test_used_original_order_is_first_access_order(fs, tmp_path):
    """Without --sorted, --used issues the used pages in the order the
    program first touched them (what a prefetch beside it must follow),
    not in the order readahead read them; each page once."""
    reads = [(fs.plain, i * PAGE, "read") for i in range(8)]
    records = [(fs.plain, 5 * PAGE, "access")]   # faulted before its read
    records += reads + [(fs.plain, 0, "read")]   # page 0 read twice
    records += [(fs.plain, 2 * PAGE, "access"), (fs.plain, 3 * PAGE, "map"),
                (fs.plain, 5 * PAGE, "access"), (fs.plain, 0, "access"),
                (fs.plain, 3 * PAGE, "access"), (fs.plain, 7 * PAGE, "map")]
    rows = plan(["--used"], trace_v2(records), tmp_path)
    assert [(off // PAGE, length // PAGE) for _, off, length, _ in rows] == [
        (5, 1), (2, 2), (0, 1), (7, 1)]


@pytest.mark.parametrize("text", [
    "# pagetrace-format: 1\n1 {plain} 0\n",
    "1 {plain} 0\n",
    "# pagetrace-format: 2\n# records: read\n1 {plain} 0 read\n",
    "# pagetrace-format: 2\n# records: read access map\n1 {plain} 0 read\n",
], ids=["v1", "headerless", "v2-read-only", "v2-no-access-records"])
def test_used_needs_access_records(fs, tmp_path, text):
    result = run_replay(["--used", "--prefetch"],
                        text.format(plain=fs.plain), tmp_path)
    assert result.returncode == 1
    assert result.stderr.splitlines() == [
        f"replay: {tmp_path / 'trace.log'}: --used needs access records, "
        f"and this trace (format version {2 if 'records' in text else 1}) "
        "has none: record it with trace --used"]


def test_used_with_no_used_page_does_nothing(fs, tmp_path):
    records = [(fs.plain, 0, "read"), (fs.plain, PAGE, "access")]
    out, err = run_json(["--used"], trace_v2(records), tmp_path)
    assert (out["requests"], out["unused_pages"]) == (0, 1)


def test_v2_default_replays_read_records_only(fs, tmp_path):
    records = [(fs.plain, 0, "read"), (fs.plain, PAGE, "access"),
               (fs.plain, 2 * PAGE, "map"), (fs.plain, 3 * PAGE, "read")]
    rows = plan([], trace_v2(records), tmp_path)
    assert [(off, length) for _, off, length, _ in rows] == [
        (0, PAGE), (3 * PAGE, PAGE)]


def test_trace_used_then_prefetch_used_end_to_end(fs, tmp_path):
    """The real tracer: a program maps a file and touches 3 pages, and
    preads a fourth; fault read-around reads hundreds. replay --used then
    prefetches the touched pages and what fault-around mapped next to
    them, and nothing else of what was read."""
    tracer = TOP / "tracer" / "trace"
    assert os.access(tracer, os.X_OK), f"{tracer} is not built: run make"
    path = os.path.join(fs.mnt, "mapped")
    loopimg.write_file(path, 4 << 20, seed=5)
    loopimg.evict(path)
    touched = {3, 100, 700}
    program = (f"import mmap, os\nfd = os.open({path!r}, os.O_RDONLY)\n"
               "m = mmap.mmap(fd, 4 << 20, prot=mmap.PROT_READ)\n"
               f"for page in {sorted(touched)}:\n    m[page * 4096]\n"
               "os.pread(fd, 4096, 900 * 4096)\n")
    log = tmp_path / "used.log"
    subprocess.run([str(tracer), "--used", "-q", "-o", str(log), "--",
                    "python3", "-c", program], check=True, timeout=60,
                   capture_output=True)
    kinds = {}
    for line in log.read_text().splitlines():
        fields = line.split()
        if not line.startswith("#") and fields[1] == path:
            kinds.setdefault(fields[3], set()).add(int(fields[2]))
    read = kinds["read"]
    used = read & (kinds.get("access", set()) | kinds.get("map", set()))
    loopimg.evict(path)
    out, _ = run_json(["--used", "--prefetch", "--sorted"],
                      log.read_text(errors="surrogateescape"), tmp_path)
    resident = loopimg.resident_pages(path)
    assert {p * PAGE for p in touched | {900}} <= resident
    assert resident == used
    assert len(resident) * 10 < len(read)
    assert out["unused_pages"] >= len(read - used)


# --- output --------------------------------------------------------------

def test_json_has_exactly_the_documented_keys(fs, tmp_path):
    result, _ = run_json(["--sorted"], trace_text(all_pages(fs.a)), tmp_path)
    assert list(result) == JSON_KEYS
    assert list(result["skipped"]) == SKIP_KEYS
    assert result["tool"] == "replay" and result["format"] == 1
    assert result["trace"].endswith("trace.log")
    assert result["order"] == "sorted" and result["grouped"] is True
    assert result["max_request_bytes"] == 1 << 20
    assert result["mean_request_bytes"] == pytest.approx(
        result["bytes"] / result["requests"])


def test_summary_on_stderr(fs, tmp_path):
    result = run_replay([], trace_text(all_pages(fs.plain)), tmp_path)
    assert result.stdout == ""
    assert re.search(r"replay: 1 requests, 1\.0 MiB from 1 "
                     r"files in [\d.]+ s: [\d.]+ MiB/s", result.stderr)
    assert "mean request 1.0 MiB, 0 seeks, seek distance 0 bytes" in \
        result.stderr
    assert "skipped pages: none" in result.stderr


def test_plan_escapes_paths(fs, tmp_path):
    result = run_replay(["--plan"], trace_text([(fs.odd, 0)]), tmp_path)
    row = result.stdout.splitlines()[1]
    assert "/we\\040ird\\054na\\012me\\134," in row
    assert len(row.split(",")) == 6


def test_progress_line_only_on_a_terminal(fs, tmp_path):
    text = trace_text([(fs.plain, 0, 1_000_000), (fs.tail, 0, 1_400_000)])
    (tmp_path / "t.log").write_text(text)
    quiet = run_replay(["--timing"], text, tmp_path)
    assert "\r" not in quiet.stderr
    pid, fd = pty.fork()
    if pid == 0:
        os.execv(str(REPLAY), [str(REPLAY), "--timing",
                               str(tmp_path / "t.log")])
    output = b""
    while True:
        ready, _, _ = select.select([fd], [], [], 10)
        try:
            chunk = os.read(fd, 4096) if ready else b""
        except OSError:
            chunk = b""
        if not chunk:
            break
        output += chunk
    os.waitpid(pid, 0)
    assert re.search(rb"\rreplay: \d/2 requests", output)


def test_help_and_usage_errors():
    for flag in ("--help", "-h"):
        result = subprocess.run([str(REPLAY), flag], capture_output=True,
                                text=True)
        assert result.returncode == 0
        assert "USAGE" in result.stdout and "EXAMPLES" in result.stdout
        assert "--used" in result.stdout
    assert subprocess.run([str(REPLAY)], capture_output=True).returncode == 2


def test_version():
    for flag in ("--version", "-V"):
        result = subprocess.run([str(REPLAY), flag], capture_output=True,
                                text=True)
        assert result.returncode == 0
        assert re.fullmatch(r"replay \(pagetrace\) \d+\.\d+\.\d+\n",
                            result.stdout)


@pytest.mark.parametrize("flag", ["-p", "-n", "-s", "-m", "-G", "-b", "-e",
                                  "-t"])
def test_old_short_options_are_gone(flag, tmp_path):
    # Issue 11: -p is a pid, -n a number of runs, -q quiet in every tool.
    result = run_replay([flag], "", tmp_path)
    assert result.returncode == 2
    assert "invalid option" in result.stderr


@pytest.mark.parametrize("size, expected", [
    ("4096", 4096), ("64k", 65536), ("64K", 65536), ("2M", 2 << 20),
    ("1g", 1 << 30), ("17179869183G", 17179869183 << 30),
    ("17179869184G", None), ("0x1000", None), ("-4096", None),
    (" 4096", None), ("4KB", None), ("4 K", None), ("", None)])
def test_max_request_sizes(fs, tmp_path, size, expected):
    # The shared size parser of lib/: bytes, or K/M/G for powers of 1024.
    result = run_replay(["--json", "-q", "--max-request", size],
                        trace_text([(fs.plain, 0)]), tmp_path)
    if expected is None:
        assert result.returncode == 2
        assert result.stderr.startswith(f"replay: --max-request: '{size}': ")
        assert result.stderr.count("\n") == 1
    else:
        assert result.returncode == 0, result.stderr
        assert json.loads(result.stdout)["max_request_bytes"] == expected


def test_quiet_prints_only_problems(fs, tmp_path):
    text = trace_text([(fs.plain, 0), (f"{fs.mnt}/nope", 0)])
    for flag in ("-q", "--quiet"):
        result = run_replay([flag], text, tmp_path)
        assert result.returncode == 0
        assert result.stderr == f"replay: {fs.mnt}/nope: No such file or " \
            "directory\n"


def test_queue_depth_and_json_short_options(fs, tmp_path):
    out, _ = run_json(["-q", "--queue-depth", "2"],
                      trace_text([(fs.plain, 0)]), tmp_path)
    assert out["queue_depth"] == 2
    result = run_replay(["-j", "-q"], trace_text([(fs.plain, 0)]), tmp_path)
    assert json.loads(result.stdout)["bytes"] == PAGE


@pytest.mark.parametrize("args, message", [
    (["--sorted", "--sort=file"], "disagree"),
    (["--buffered", "--prefetch"], "conflict"),
    (["--json", "--plan"], "both write stdout"),
    (["--no-group", "--max-request", "64k"], "conflict"),
    (["--timing", "--sorted"], "original order"),
    (["--plan", "--evict"], "no I/O"),
    (["--queue-depth", "0"], "queue-depth"),
    (["--queue-depth", "999"], "queue-depth"),
    (["--max-request", "12q"], "max-request"),
    (["--sort=size"], "sort key"),
])
def test_option_conflicts(args, message, tmp_path):
    result = run_replay(args, "", tmp_path)
    assert result.returncode == 2
    assert message in result.stderr


# --- bad input -----------------------------------------------------------

BAD_INPUTS = {
    # name: (trace line or (path, offset), skipped key, reason in message)
    "missing": (("{mnt}/nope", 0), "missing", "No such file or directory"),
    "directory": (("{mnt}/dir", 0), "not_regular", "is a directory"),
    "fifo": (("{mnt}/fifo", 0), "not_regular", "is a FIFO"),
    "char_device": (("/dev/null", 0), "not_regular", "is a character device"),
    "symlink_loop": (("{mnt}/loop1", 0), "missing",
                     "Too many levels of symbolic links"),
    "short_file": (("{mnt}/tail", 65536), "short_file",
                   "file is 10000 bytes, shorter than traced offset 65536"),
    "malformed": ("1 {mnt}/plain", "malformed", "fewer than three fields"),
    "bad_escape": ("1 {mnt}/pl\\9ain 0", "malformed", "bad escape in path"),
    "relative": ("1 plain 0", "malformed", "path is not absolute"),
    "nul_in_path": ("1 {mnt}/pl\\000ain 0", "malformed", "NUL byte"),
    "negative": ("1 {mnt}/plain -4096", "bad_offset",
                 "offset is not an unsigned integer"),
    "unaligned": ("1 {mnt}/plain 4097", "bad_offset",
                  "not a multiple of page-size"),
    "huge_64bit": ("1 {mnt}/plain 18446744073709551616", "bad_offset",
                   "does not fit in 64 bits"),
    "huge_off_t": ("1 {mnt}/plain 9223372036854775808", "bad_offset",
                   "offset is too large"),
    "deleted": (("//deleted/tmp/gone", 0), "special_path", "deleted"),
    "unknown_name": (("//unknown/254:1/4242", 0), "special_path",
                     "name is unknown"),
    "unmounted": (("//dev/7:3/lost/file", 0), "special_path", "not mounted"),
}


def bad_trace(fs, spec):
    good = trace_text([(fs.plain, 0)])
    if isinstance(spec, tuple):
        path = spec[0].format(mnt=fs.mnt, loop=fs.loop)
        return good + trace_text([(path, spec[1])], header=False), path
    return good + spec.format(mnt=fs.mnt) + "\n", None


@pytest.mark.parametrize("name", sorted(BAD_INPUTS))
def test_bad_input_is_reported_counted_and_skipped(fs, tmp_path, name):
    spec, key, reason = BAD_INPUTS[name]
    text, path = bad_trace(fs, spec)
    start = time.monotonic()
    result = run_replay(["--json"], text, tmp_path, timeout=20)
    assert time.monotonic() - start < 10
    assert result.returncode == 0, result.stderr
    out = json.loads(result.stdout)
    assert out["skipped"] == {k: int(k == key) for k in SKIP_KEYS}
    assert out["requests"] == 1 and out["bytes"] == PAGE
    where = escape(path) if path else f"{tmp_path / 'trace.log'}:4"
    messages = [line for line in result.stderr.splitlines()
                if line.startswith(f"replay: {where}: ")]
    assert len(messages) == 1, result.stderr
    assert reason in messages[0]


@pytest.mark.parametrize("name", ["missing", "fifo", "short_file",
                                  "malformed", "unaligned", "deleted"])
def test_strict_makes_bad_input_fatal(fs, tmp_path, name):
    text, _ = bad_trace(fs, BAD_INPUTS[name][0])
    result = run_replay(["--strict", "--json"], text, tmp_path, timeout=20)
    assert result.returncode == 1
    assert "stopping (--strict)" in result.stderr
    assert result.stdout == ""


def test_bad_input_reported_once_per_file(fs, tmp_path):
    text = trace_text([(f"{fs.mnt}/nope", off) for off in range(0, 40960,
                                                                 4096)]
                      + [(fs.plain, 0)])
    out, err = run_json([], text, tmp_path)
    assert out["skipped"]["missing"] == 10
    assert err.count("nope: No such file") == 1


def test_unknown_version_is_rejected(tmp_path):
    result = run_replay([], "# pagetrace-format: 3\n1 /etc/hostname 0\n",
                        tmp_path)
    assert result.returncode == 1
    assert "unsupported trace format version '3'" in result.stderr


@pytest.mark.parametrize("text, reason", [
    ("", "empty file"),
    ("{good}\x00\n", "binary data (NUL byte), not a trace"),
    ("# page-size: 4000\n{good}", "bad page-size '4000'"),
    ("# pagetrace-format: 2\n# records: read\n# columns: timestamp_us "
     "path offset comm\n{good}", "bad header: columns: version 2 needs "
     "'kind' as the fourth name, not 'comm'"),
    ("# pagetrace-format: 2\n{good}", "bad header: no records key "
     "(version 2 needs it)"),
], ids=["empty", "nul", "page-size", "columns", "records"])
def test_refused_trace_replays_nothing(fs, tmp_path, text, reason):
    # The good record comes before the defect: nothing may be read.
    good = f"1 {fs.plain} 0\n"
    loopimg.evict(fs.plain)
    result = run_replay(["--json", "--buffered"], text.format(good=good),
                        tmp_path)
    assert result.returncode == 1
    assert result.stdout == ""
    assert result.stderr == f"replay: {tmp_path / 'trace.log'}: {reason}\n"
    assert residency([fs.plain]) == set()


def test_lost_events_warn(fs, tmp_path):
    text = trace_text([(fs.plain, 0)]) + "# end: pages=1 lost=5\n"
    result = run_replay([], text, tmp_path)
    assert result.returncode == 0
    assert "lost 5 events" in result.stderr


def test_nothing_replayable_fails(fs, tmp_path):
    result = run_replay([], trace_text([(f"{fs.mnt}/nope", 0)]), tmp_path)
    assert result.returncode == 1
    assert "nothing could be replayed" in result.stderr


def test_missing_trace_fails(tmp_path):
    result = subprocess.run([str(REPLAY), str(tmp_path / "none.log")],
                            capture_output=True, text=True)
    assert result.returncode == 1
    assert result.stderr.startswith(
        f"replay: {tmp_path / 'none.log'}: No such file or directory")


@pytest.fixture(scope="module")
def ramfs():
    with loopimg.ram_mount("ramfs") as mnt:
        path = os.path.join(mnt, "file")
        with open(path, "wb") as f:
            f.write(os.urandom(5 * PAGE))
        yield path


def test_not_readable_is_its_own_reason_said_once(fs, tmp_path):
    # Root without CAP_DAC_OVERRIDE and CAP_DAC_READ_SEARCH may not open a
    # mode 000 file: EACCES, as a sandbox's device node gives EPERM.
    locked = os.path.join(fs.mnt, "locked")
    loopimg.write_file(locked, 3 * PAGE, seed=9)
    os.chmod(locked, 0)
    try:
        text = trace_text([(fs.plain, 0)] + all_pages(locked)
                          + [(locked, 0)])
        no_dac = ["setpriv", "--inh-caps=-dac_override,-dac_read_search",
                  "--bounding-set=-dac_override,-dac_read_search"]
        trace = tmp_path / "trace.log"
        trace.write_bytes(text.encode("latin-1"))
        result = subprocess.run([*no_dac, str(REPLAY), "--json", str(trace)],
                                capture_output=True, text=True, timeout=60)
    finally:
        os.unlink(locked)
    assert result.returncode == 0, result.stderr
    out = json.loads(result.stdout)
    assert out["skipped"]["not_readable"] == 4
    assert out["skipped"]["io_error"] == 0
    assert out["pages"] == 1
    said = [line for line in result.stderr.splitlines() if locked in line]
    assert said == [f"replay: {locked}: not readable: Permission denied"]
    assert "skipped pages: 4 not_readable" in result.stderr


def test_odirect_refused_suggests_buffered(fs, ramfs, tmp_path):
    text = trace_text([(fs.plain, 0), (ramfs, 0), (ramfs, 4096)])
    out, err = run_json([], text, tmp_path)
    assert out["skipped"]["odirect_refused"] == 2
    assert out["requests"] == 1
    assert f"replay: {ramfs}: filesystem refuses O_DIRECT" in err
    assert "try --buffered" in err
    buffered, _ = run_json(["--buffered"], text, tmp_path)
    assert buffered["skipped"]["odirect_refused"] == 0
    assert buffered["bytes"] == 3 * PAGE


def test_fiemap_failure_falls_back_to_file_order(fs, ramfs, tmp_path):
    # plain's device comes first in the trace, so its requests go first.
    pages = [(fs.plain, 0), (ramfs, 8192), (ramfs, 0)]
    result = run_replay(["--plan", "--sorted", "--no-group"],
                        trace_text(pages), tmp_path)
    assert result.returncode == 0
    assert result.stderr.count("FIEMAP failed") == 1
    rows = [r.split(",") for r in result.stdout.splitlines()[1:]]
    assert [(r[1], r[2], r[5]) for r in rows] == [
        (escape(fs.plain), "0", rows[0][5]), (ramfs, "0", ""),
        (ramfs, "8192", "")]
    assert rows[0][5] != ""


# --- read-only -----------------------------------------------------------

MODES = [[], ["--sorted"], ["--buffered"], ["--prefetch"], ["--evict"],
         ["--sort=file", "--queue-depth", "3"], ["--plan"]]


def test_replay_changes_nothing(fs, tmp_path):
    before = {p: loopimg.file_state(p) for p in fs.regular}
    text = trace_text(all_pages(*fs.regular))
    for args in MODES:
        assert run_replay(args, text, tmp_path).returncode == 0
    assert {p: loopimg.file_state(p) for p in fs.regular} == before


@pytest.mark.parametrize("args", MODES, ids=lambda a: " ".join(a) or "direct")
def test_replay_opens_nothing_for_writing(fs, tmp_path, args):
    text = trace_text(all_pages(*fs.regular) + [(fs.fifo, 0)])
    (tmp_path / "trace.log").write_text(text, errors="surrogateescape")
    log = tmp_path / "strace.log"
    subprocess.run(["strace", "-f", "-qq", "-e", "trace=open,openat,openat2",
                    "-o", str(log), str(REPLAY), *args,
                    str(tmp_path / "trace.log")],
                   capture_output=True, timeout=60, check=True)
    opens = [line for line in log.read_text().splitlines()
             if "open" in line and "= -1" not in line]
    assert any(fs.mnt in line for line in opens)
    for line in opens:
        assert "O_RDONLY" in line, line
        assert not re.search(r"O_WRONLY|O_RDWR|O_CREAT|O_TRUNC", line), line
    assert not any("fifo" in line for line in opens)


# --- fuzzing -------------------------------------------------------------

def test_fuzz_check():
    result = subprocess.run(["make", "-s", "-C", str(TOP / "replay"),
                             "fuzz-check", "FUZZ_SECONDS=5"],
                            capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr + result.stdout
    assert "sanitized parser ran over samples/" in result.stdout


def test_trace_that_is_a_directory_fails_cleanly(tmp_path):
    result = subprocess.run([str(REPLAY), str(tmp_path)], capture_output=True,
                            text=True, timeout=10)
    assert result.returncode == 1
    assert result.stderr.startswith(f"replay: {tmp_path}: read error: ")


def test_seeks_leave_out_unlocated_requests(fs, ramfs, tmp_path):
    pages = [(fs.plain, 0), (ramfs, 0), (fs.plain, 3 * PAGE)]
    out, _ = run_json(["--buffered", "--no-group"], trace_text(pages),
                      tmp_path)
    ext = loopimg.filefrag_extents(fs.plain)
    jump = loopimg.physical_of(ext, 3 * PAGE) - \
        (loopimg.physical_of(ext, 0) + PAGE)
    assert out["requests"] == 3
    assert (out["seeks"], out["seek_distance_bytes"]) == (1, abs(jump))


def test_seeks_in_file_space_when_nothing_is_located(ramfs, tmp_path):
    other = os.path.join(os.path.dirname(ramfs), "other")
    with open(other, "wb") as f:
        f.write(b"y" * PAGE)
    pages = [(ramfs, 0), (ramfs, 2 * PAGE), (other, 0), (ramfs, 3 * PAGE)]
    out, _ = run_json(["--buffered", "--no-group"], trace_text(pages),
                      tmp_path)
    # 0 -> 8192 jumps 4096 bytes; both switches of file are seeks of
    # unknown distance.
    assert (out["seeks"], out["seek_distance_bytes"]) == (3, PAGE)


def test_latencies_one_row_per_read_with_its_issue_time(fs, tmp_path):
    base = 1_700_000_000_000_000
    pages = [(fs.plain, 0, base), (fs.plain, 8192, base + 150_000),
             (fs.tail, 8192, base + 300_000)]
    out = tmp_path / "lat.csv"
    run, _ = run_json(["--timing", "--no-group", "--latencies", str(out)],
                      trace_text(pages), tmp_path)
    rows = list(csv.reader(out.read_text().splitlines()))
    assert rows[0] == ["order", "path", "offset", "length", "dev",
                       "physical_offset", "bytes", "start_ns", "latency_ns"]
    assert [(unescape(r[1]), int(r[2]), int(r[6])) for r in rows[1:]] == [
        (fs.plain, 0, 4096), (fs.plain, 8192, 4096),
        (fs.tail, 8192, 10000 - 8192)]
    start = [int(r[7]) for r in rows[1:]]
    latency = [int(r[8]) for r in rows[1:]]
    # --timing holds each read until its trace time: 0, 150 and 300 ms.
    assert start[0] < 50e6
    assert 150e6 <= start[1] < 200e6 and 300e6 <= start[2] < 350e6
    # One at a time: each read ends before the next starts, and the last
    # one within the run's elapsed time.
    assert all(s + lat <= nxt for s, lat, nxt in
               zip(start, latency, start[1:]))
    assert start[2] + latency[2] <= run["elapsed_s"] * 1e9
    assert all(lat > 0 for lat in latency)


def test_latencies_usage_errors(fs, tmp_path):
    text = trace_text([(fs.plain, 0)])
    for args, why in ((["--plan", "--latencies", "x.csv"], "--plan does no"),
                      (["--json", "--latencies", "-"], "both write stdout")):
        result = run_replay(args, text, tmp_path)
        assert result.returncode == 2 and why in result.stderr
    result = run_replay(["--latencies", str(tmp_path / "no" / "x.csv")],
                        text, tmp_path)
    assert result.returncode == 1
    assert "x.csv: No such file or directory" in result.stderr


def test_first_reads_keeps_each_page_once_at_its_first_read(fs, tmp_path):
    """A page read again (evicted in between) is left out; the others keep
    their trace order and group as before."""
    pages = [(fs.plain, 0), (fs.plain, 4096), (fs.tail, 0), (fs.plain, 0),
             (fs.plain, 8192), (fs.tail, 0), (fs.plain, 4096)]
    every = plan([], trace_text(pages), tmp_path)
    assert [(p, off, n) for p, off, n, _ in every] == [
        (fs.plain, 0, 8192), (fs.tail, 0, 4096), (fs.plain, 0, 4096),
        (fs.plain, 8192, 4096), (fs.tail, 0, 4096), (fs.plain, 4096, 4096)]
    first = plan(["--first-reads"], trace_text(pages), tmp_path)
    assert [(p, off, n) for p, off, n, _ in first] == [
        (fs.plain, 0, 8192), (fs.tail, 0, 4096), (fs.plain, 8192, 4096)]
    run, err = run_json(["--first-reads", "--buffered"], trace_text(pages),
                        tmp_path)
    assert run["pages"] == 4 and run["requests"] == 3
    assert "--first-reads: 3 repeated read records left out" in err
    result = run_replay(["--first-reads", "--used"], trace_text(pages),
                        tmp_path)
    assert result.returncode == 2 and "--used already" in result.stderr
