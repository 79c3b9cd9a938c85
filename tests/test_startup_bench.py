"""scripts/startup-bench with the built-in workload samples/.output/startup-app.

As root, under /var/tmp (a block-device filesystem), cleaned up afterwards.
The prefetched and simulated states run once with a fake replay script that
logs how it was called, and once with the real replay/replay. The
prefetched-used and concurrent states run on a version 2 trace of the
workload: its read records are the pages it asks for plus pages it never
touches (as readahead would read), its access records the pages it asks
for; the page cache afterwards (mincore, cachestat) is the ground truth.
"""
import csv
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

import pytest

from conftest import REPO, require_root
from pagecache_util import PAGE, cached_since_eviction, resident_pages

BENCH = os.path.join(REPO, "scripts", "startup-bench")
STARTUP_APP = os.path.join(REPO, "samples", ".output", "startup-app")
REAL_REPLAY = os.path.join(REPO, "replay", "replay")
PAGECACHE = os.path.join(REPO, "scripts", "pagecache")
NOBODY = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"]
CSV_HEADER = ["run", "state", "iteration", "status", "elapsed_s", "prefetch_s",
              "total_s", "cold_fraction", "throttle"]
ALL_STATES = ["cold", "selective", "hot", "prefetched", "simulated"]
USED_STATES = ["prefetched-used", "concurrent"]
TRACER = os.path.join(REPO, "tracer", "trace")
# Pages per file that the used trace says were read and never accessed.
UNUSED_PER_FILE = 3

FAKE_REPLAY = """#!/bin/sh
# Stands in for replay/replay: logs its arguments; "prefetches" by reading
# the traced files, and "replays" with O_DIRECT by doing nothing for 10 ms.
for trace; do :; done
echo "$*" >> "{log}"
cp "$trace" "{log}.$(wc -l < "{log}")"
case "$1" in
--sorted) grep -v '^#' "$trace" | awk '{{print $2}}' | sort -u | xargs cat > /dev/null ;;
--prefetch) grep -v '^#' "$trace" | awk '{{print $2}}' | sort -u | xargs cat > /dev/null ;;
*) sleep 0.01 ;;
esac
"""

# Stands in for replay in the concurrent state: notes when it starts and
# ends, and takes 1 s, so that the test sees whether the command ran
# alongside it or after it.
SLOW_REPLAY = """#!/bin/sh
echo "start $(date +%s.%N) $*" >> "{log}"
sleep 1
echo "end $(date +%s.%N)" >> "{log}"
"""


def pages_of(trace_path):
    """{path: set of page indices} of a trace's records (v1, or of one
    kind in v2), read here rather than by the code under test."""
    pages = {}
    with open(trace_path) as f:
        for line in f:
            if line.startswith("#") or not line.strip():
                continue
            _, path, offset, *rest = line.split()
            if not rest or rest[0] == "read":
                pages.setdefault(path, set()).add(int(offset) // PAGE)
    return pages


def write_used_trace(path, intended, command):
    """A version 2 trace: read records for the intended pages and for
    UNUSED_PER_FILE more pages of each file, access records for the
    intended pages only. Returns {path: unused page indices}."""
    unused = {}
    for name, wanted in intended.items():
        npages = (os.path.getsize(name) + PAGE - 1) // PAGE
        unused[name] = set([p for p in range(npages) if p not in wanted][:UNUSED_PER_FILE])
    lines = ["# pagetrace-format: 2", "# page-size: 4096", "# clock: realtime-us",
             "# columns: timestamp_us path offset kind", "# records: read access map",
             f"# command: {command}"]
    ts = 1_763_900_000_000_000
    # Accessed in another order than read (files in reverse), as readahead
    # reads ahead of the accesses: the prefetch must follow the accesses.
    for kind, pages in (("read", {n: intended[n] | unused[n] for n in intended}),
                        ("access", dict(reversed(intended.items())))):
        for name in pages:
            for page in sorted(pages[name]):
                ts += 10
                lines.append(f"{ts} {name} {page * PAGE} {kind}")
    with open(path, "w") as f:
        f.write("\n".join(lines) + "\n")
    return unused


class Workload:
    """startup-app's files, its own trace of them, and a scratch directory."""

    def __init__(self):
        require_root()
        subprocess.run(["make", "-s", "-C", os.path.join(REPO, "samples")], check=True)
        self.root = tempfile.mkdtemp(prefix="startup-bench-test-", dir="/var/tmp")
        os.chmod(self.root, 0o755)  # the non-root tests read it as nobody
        assert os.major(os.stat(self.root).st_dev) != 0, "not on a block device"
        self.data = os.path.join(self.root, "app")
        subprocess.run([STARTUP_APP, "--setup", self.data], check=True,
                       stdout=subprocess.DEVNULL)
        self.trace = os.path.join(self.root, "intended.log")
        with open(self.trace, "w") as f:
            subprocess.run([STARTUP_APP, "--list-pages", self.data], check=True, stdout=f)
        self.intended = pages_of(self.trace)
        self.used_trace = os.path.join(self.root, "used.log")
        self.unused = write_used_trace(self.used_trace, self.intended,
                                       f"{STARTUP_APP} {self.data}")
        self.replay_log = os.path.join(self.root, "replay-calls.log")
        self.fake_replay = os.path.join(self.root, "fake-replay")
        with open(self.fake_replay, "w") as f:
            f.write(FAKE_REPLAY.format(log=self.replay_log))
        os.chmod(self.fake_replay, 0o755)
        self.command = [STARTUP_APP, self.data]

    def scratch(self, name):
        """A world-writable directory for one test."""
        path = os.path.join(self.root, name)
        os.mkdir(path)
        os.chmod(path, 0o777)
        return path


@pytest.fixture(scope="module")
def workload():
    w = Workload()
    yield w
    shutil.rmtree(w.root, ignore_errors=True)


def bench(*args, command, prefix=(), env=None, timeout=120):
    return subprocess.run([*prefix, BENCH, *args, "--", *command],
                          capture_output=True, text=True, timeout=timeout,
                          env=env)


def read_csv(path):
    with open(path, newline="") as f:
        rows = list(csv.reader(f))
    assert rows[0] == CSV_HEADER
    return [dict(zip(CSV_HEADER, row)) for row in rows[1:]]


def check_run_arithmetic(row):
    elapsed = float(row["elapsed_s"])
    prefetch = float(row["prefetch_s"]) if row["prefetch_s"] else 0.0
    if row["state"] in ("concurrent", "concurrent-merged"):
        prefetch = 0.0  # it ran beside the command, timed from the same start
    assert float(row["total_s"]) == pytest.approx(elapsed + prefetch, abs=2e-6)


def real_replay():
    if not os.access(REAL_REPLAY, os.X_OK):
        subprocess.run(["make", "-s", "-C", os.path.join(REPO, "replay")],
                       capture_output=True, text=True)
    assert os.access(REAL_REPLAY, os.X_OK), "replay/replay could not be built"
    return REAL_REPLAY


def cached_now(pages):
    """{path: pages brought into the cache since the harness evicted it}."""
    return {name: cached_since_eviction(name) for name in pages}


# ---------------------------------------------------------------------------
# All five states

def test_all_five_states_interleaved_and_every_run_in_the_csv(workload):
    out = os.path.join(workload.scratch("five"), "runs.csv")
    done = bench("--trace", workload.trace, "-n", "3", "--csv", out, "--json",
                 "--replay", workload.fake_replay, command=workload.command)

    assert done.returncode == 0, done.stderr
    rows = read_csv(out)
    assert len(rows) == 15
    assert [r["state"] for r in rows] == ALL_STATES * 3
    assert [r["run"] for r in rows] == [str(i) for i in range(15)]
    assert [r["iteration"] for r in rows] == [str(i // 5) for i in range(15)]
    assert {r["status"] for r in rows} == {"ok"}
    for row in rows:
        check_run_arithmetic(row)
        has_replay = row["state"] in ("prefetched", "simulated")
        assert (row["prefetch_s"] != "") == has_replay
        evicting = row["state"] in ("selective", "prefetched", "simulated")
        assert (row["cold_fraction"] != "") == evicting
        if evicting:
            # The workload's files are mapped by nobody: eviction is complete.
            assert float(row["cold_fraction"]) == 1.0
    with open(workload.replay_log) as f:
        calls = f.read().splitlines()
    assert calls.count(f"--sorted --prefetch {workload.trace}") == 3
    assert calls.count(f"--first-reads {workload.trace}") == 3

    report = json.loads(done.stdout)
    assert set(report["summary"]) == set(ALL_STATES)
    assert all(s["ok"] == 3 and s["runs"] == 3 for s in report["summary"].values())
    assert len(report["runs"]) == 15
    assert report["refused"] == {}
    assert report["comparisons"]["simulated_vs_selective_percent"] is not None
    assert "[15/15] simulated #2: ok" in done.stderr


def test_real_replay_in_prefetched_and_simulated_states(workload):
    if not os.access(REAL_REPLAY, os.X_OK):
        build = subprocess.run(["make", "-s", "-C", os.path.join(REPO, "replay")],
                               capture_output=True, text=True)
        if build.returncode != 0 or not os.access(REAL_REPLAY, os.X_OK):
            pytest.skip(f"replay/replay could not be built: {build.stderr[-300:]}")
    out = os.path.join(workload.scratch("real-replay"), "runs.csv")
    done = bench("--trace", workload.trace, "-n", "2", "--csv", out,
                 "--states", "selective,prefetched,simulated",
                 "--replay", REAL_REPLAY, command=workload.command)

    assert done.returncode == 0, done.stderr
    rows = read_csv(out)
    assert [r["state"] for r in rows] == ["selective", "prefetched", "simulated"] * 2
    assert {r["status"] for r in rows} == {"ok"}
    for row in rows[1:3] + rows[4:6]:
        assert float(row["prefetch_s"]) > 0
        check_run_arithmetic(row)
    # What the two states rely on: --prefetch fills exactly the traced pages,
    # the O_DIRECT replay leaves them cold.
    for options, expected_cached in ((["--sorted", "--prefetch"], "all"), ([], 0)):
        subprocess.run([PAGECACHE, "evict", "-r", workload.data], check=True,
                       capture_output=True)
        subprocess.run([REAL_REPLAY, *options, workload.trace], check=True,
                       capture_output=True)
        total = json.loads(subprocess.run(
            [PAGECACHE, "status", "--json", "--trace", workload.trace],
            check=True, capture_output=True, text=True).stdout)["total"]
        assert total["traced_pages"] > 300
        wanted = total["traced_pages"] if expected_cached == "all" else 0
        # Pages the kernel reclaimed again since (DAMON pageout on this VM)
        # still count as read: `evict` cleared every shadow entry, so each
        # one cachestat counts as evicted now was brought in by the replay.
        assert total["traced_cached"] + total["evicted"] == wanted, options


# ---------------------------------------------------------------------------
# prefetched-used and concurrent: only the used pages, against the kernel

def test_used_states_call_replay_with_the_used_trace(workload):
    """--used-trace names the trace of the used pages; --trace stays the
    one whose read records the other states use. The used states replay
    the list of used pages compiled from it, without --sorted for
    concurrent."""
    log = os.path.join(workload.scratch("used-calls"), "calls.log")
    fake = os.path.join(workload.root, "fake-replay-used")
    with open(fake, "w") as f:
        f.write(FAKE_REPLAY.format(log=log))
    os.chmod(fake, 0o755)
    out = os.path.join(os.path.dirname(log), "runs.csv")
    done = bench("--trace", workload.trace, "--used-trace", workload.used_trace,
                 "-n", "2", "--csv", out, "--json", "--replay", fake,
                 command=workload.command)

    assert done.returncode == 0, done.stderr
    rows = read_csv(out)
    # With a used trace at hand the default is every state.
    order = ["cold", "selective", "hot", "prefetched", "prefetched-used",
             "concurrent", "simulated"]
    assert [r["state"] for r in rows] == order * 2
    for row in rows:
        check_run_arithmetic(row)
        assert (row["prefetch_s"] != "") == (row["state"] in (
            "prefetched", "prefetched-used", "concurrent", "simulated"))
    with open(log) as f:
        calls = f.read().splitlines()
    # The used trace compiled once, before the runs, into the list of used
    # pages in first-access order, which both states replay.
    used_list = calls[1].split()[-1]
    assert used_list.endswith("/used-pages.log") and not os.path.exists(used_list)
    assert calls == [f"--sorted --prefetch {workload.trace}",
                     f"--sorted --prefetch {used_list}",
                     f"--prefetch {used_list}",
                     f"--first-reads {workload.trace}"] * 2
    with open(f"{log}.2") as f:
        listed = [line.split()[:3] for line in f if not line.startswith("#")]
    with open(workload.used_trace) as f:
        accessed = [line.split()[:3] for line in f if line.endswith(" access\n")]
    assert listed == accessed
    report = json.loads(done.stdout)
    assert report["states"] == order
    gains = report["comparisons"]["prefetch_gains"]
    assert set(gains) == {"prefetched", "prefetched-used", "concurrent"}
    assert all(g["iterations"] == 2 == g["recovered_iterations"] for g in gains.values())
    # A best state only among those whose I/O cost is out of the noise.
    best = report["comparisons"]["best_prefetch_state"]
    clear = {s for s, g in gains.items() if not g["io_cost_in_noise"]}
    assert best in clear if clear else best is None


def test_merged_states_replay_the_union_of_every_used_trace(workload):
    """With --used-trace twice, prefetched-used and concurrent prefetch the
    used pages of the first trace, prefetched-merged and concurrent-merged
    the union of both (compiled once, into merged-pages.log), with --sorted
    before the start and without it beside the start, where
    concurrent-merged keeps the replay's queue short (--window, 1M by
    default)."""
    scratch = workload.scratch("merged-calls")
    log = os.path.join(scratch, "calls.log")
    fake = os.path.join(scratch, "fake-replay")
    with open(fake, "w") as f:
        f.write(FAKE_REPLAY.format(log=log))
    os.chmod(fake, 0o755)
    # The second run used another page of each file that has one, and not
    # the first one.
    second = {n: (p - {min(p)}) | {min(workload.unused[n])} if workload.unused[n] else p
              for n, p in workload.intended.items()}
    other = os.path.join(scratch, "used2.log")
    write_used_trace(other, second, f"{STARTUP_APP} {workload.data}")
    states = "prefetched-used,concurrent,prefetched-merged,concurrent-merged"
    out = os.path.join(scratch, "runs.csv")
    done = bench("--trace", workload.trace, "--used-trace", workload.used_trace,
                 "--used-trace", other, "--fill-varying", "0", "-n", "1",
                 "--states", states, "--csv", out, "--replay", fake,
                 command=workload.command)

    assert done.returncode == 0, done.stderr
    rows = read_csv(out)
    assert [r["state"] for r in rows] == states.split(",")
    for row in rows:
        check_run_arithmetic(row)
    with open(log) as f:
        calls = f.read().splitlines()
    used_list, merged_list = calls[0].split()[-1], calls[2].split()[-1]
    assert used_list.endswith("/used-pages.log")
    assert merged_list.endswith("/merged-pages.log")
    assert calls == [f"--sorted --prefetch {used_list}", f"--prefetch {used_list}",
                     f"--sorted --prefetch {merged_list}",
                     f"--prefetch --window 1M {merged_list}"]
    union = {n: workload.intended[n] | second[n] for n in workload.intended}
    assert pages_of(f"{log}.1") == workload.intended
    assert pages_of(f"{log}.3") == pages_of(f"{log}.4") == union
    assert union != workload.intended


@pytest.mark.unit
def test_used_pages_list(tmp_path):
    """The compiled list: read pages with an access or map record, once
    each, by the time of their first such record (an access may precede
    the read; a later record may carry an earlier time), escaped paths."""
    sys.path.insert(0, os.path.join(REPO, "analysis"))
    from pagetrace import bench as bench_module, tracefile
    odd = "/tmp/a b\\040c"           # written escaped: a space, a backslash
    trace = tmp_path / "used.log"
    trace.write_text("\n".join([
        "# pagetrace-format: 2", "# page-size: 4096",
        "# columns: timestamp_us path offset kind", "# records: read access map",
        "50 /tmp/x 0 access",            # before its read
        "100 /tmp/x 0 read", "100 /tmp/x 4096 read", "100 /tmp/x 8192 read",
        "100 /tmp/a\\040b\\134040c 0 read",
        "300 /tmp/x 8192 map",
        "400 /tmp/x 8192 access",        # accessed after its map: map counts
        "200 /tmp/a\\040b\\134040c 0 access",  # earlier time, later record
        "500 /tmp/x 12288 access",       # never read: cached already
        "600 /tmp/y 0 access"]) + "\n")
    path, count = bench_module.used_pages([tracefile.read(str(trace))], str(tmp_path))
    listed = tracefile.read(path)
    assert listed.header.version == 1 and count == 3
    assert [(r.ts_us, r.path, r.offset) for r in listed.records] == [
        (50, "/tmp/x", 0), (200, odd, 0), (300, "/tmp/x", 8192)]


MERGE_A = """\
# pagetrace-format: 2
# page-size: 4096
# columns: timestamp_us path offset kind cause
# records: read access map
1000 /f 0 read fault
1000 /f 8192 read fault
1000 /f 20480 read fault
1000 /f 36864 read fault
1010 /f 0 access fault
1015 /g 0 read forced_ra
1015 /g 4096 read forced_ra
1020 /f 8192 access fault
1030 /f 36864 access fault
1040 /f 20480 map fault
1050 /dev/vda 0 read forced_ra
"""
MERGE_B = """\
# pagetrace-format: 2
# page-size: 4096
# columns: timestamp_us path offset kind cause
# records: read access map
5000 /f 0 read fault
5000 /f 8192 read fault
5000 /f 12288 read fault
5000 /f 36864 read fault
5005 /f 0 access fault
5008 /f 12288 access fault
5050 /f 36864 access fault
5060 /f 8192 access fault
"""
# A trace of the disk's own read_ahead_kb: a longer preload of /g.
MERGE_C = """\
# pagetrace-format: 2
# page-size: 4096
# columns: timestamp_us path offset kind cause
# records: read access map
7000 /f 0 read fault
7001 /g 8192 read forced_ra
7002 /f 0 access fault
"""


@pytest.mark.unit
def test_merged_list_union_fill_and_preloads(tmp_path):
    """The merged list, exactly: the union of the used pages of two runs
    (A: pages 0 2 5 9 of /f, B: 0 2 3 9), each at its earliest first access
    counted from its own trace's start (page 0 at B's +5 us before A's
    +10); pages 3 and 5 vary between the runs, 2 pages apart, so
    --fill-varying 2 adds page 4 right after page 3 and --fill-varying 1
    does not; preloads add the forced-readahead pages of /g (A: pages 0 and
    1 at +15 us; C, recorded with a larger read_ahead_kb: page 2 too),
    never the metadata page. Times are written from the first trace's
    start."""
    sys.path.insert(0, os.path.join(REPO, "analysis"))
    from pagetrace import bench as bench_module, tracefile
    traces = []
    for name, text in (("a", MERGE_A), ("b", MERGE_B), ("c", MERGE_C)):
        (tmp_path / f"{name}.log").write_text(text)
        traces.append(tracefile.read(str(tmp_path / f"{name}.log")))
    a, b, c = traces

    def listed(*args, **kwargs):
        path, count = bench_module.used_pages(*args, str(tmp_path), "m.log", **kwargs)
        records = tracefile.read(path).records
        assert count == len(records)
        return [(r.ts_us, r.path, r.offset // 4096) for r in records]

    union = [(1005, "/f", 0), (1008, "/f", 3), (1020, "/f", 2), (1030, "/f", 9),
             (1040, "/f", 5)]
    assert listed([a, b]) == union
    assert listed([a, b], fill=1) == union
    filled = union[:2] + [(1008, "/f", 4)] + union[2:]
    assert listed([a, b], fill=2) == filled
    # One trace: nothing varies, nothing is filled.
    assert listed([a], fill=100) == [(1010, "/f", 0), (1020, "/f", 2),
                                     (1030, "/f", 9), (1040, "/f", 5)]
    preloaded = filled[:3] + [(1015, "/g", 0), (1015, "/g", 1)]
    assert listed([a, b], fill=2, preloads=True) == preloaded + filled[3:]
    # C's longer preload of /g joins at the time of /g's first preload in
    # the traces of the list (A's +15 us), not at its own +1 us.
    assert listed([a, b], fill=2, preloads=True, preload_traces=[c]) == (
        preloaded + [(1015, "/g", 2)] + filled[3:])
    # preload_traces count only with preloads; a file the list's traces
    # never preloaded keeps the other trace's own time.
    assert listed([a, b], fill=2, preload_traces=[c]) == filled
    assert listed([b], preloads=True, preload_traces=[c]) == [
        (5001, "/g", 2), (5005, "/f", 0), (5008, "/f", 3), (5050, "/f", 9),
        (5060, "/f", 2)]


def test_prefetched_used_caches_exactly_the_used_pages(workload):
    """Ground truth from the kernel: after a prefetched-used run, the
    workload's files hold exactly the pages it used, not the pages the
    trace says were read and never used. readahead(2) reads exactly the
    range asked (no window), and the workload then finds every page it asks
    for in the cache, so neither a fault nor a read triggers readahead; on
    this disk (read_ahead_kb 8192 here) a single miss would bring in up to
    2,048 more pages. prefetched, from the same trace, caches the unused
    pages as well."""
    replay = real_replay()
    expected = {"prefetched-used": workload.intended,
                "prefetched": {n: workload.intended[n] | workload.unused[n]
                               for n in workload.intended}}
    assert sum(map(len, workload.unused.values())) > 40
    for state, wanted in expected.items():
        out = os.path.join(workload.scratch(f"exact-{state}"), "runs.csv")
        done = bench("--trace", workload.used_trace, "-n", "1", "--states", state,
                     "--csv", out, "--replay", replay, command=workload.command)
        assert done.returncode == 0, done.stderr
        row = read_csv(out)[0]
        assert (row["state"], row["status"], row["cold_fraction"]) == (state, "ok", "1.0000")
        assert float(row["prefetch_s"]) > 0
        # Resident now, or reclaimed since (DAMON): the harness's eviction
        # (DONTNEED) cleared every shadow entry before the prefetch.
        assert cached_now(wanted) == wanted, state


def test_prefetched_used_from_a_real_trace_used_recording(workload):
    """End to end: trace --used of the workload from evicted files, then
    prefetched-used on that trace: what is cached afterwards is exactly the
    read pages that have an access or map record (map: fault-around put
    them in the page tables, so the workload may use them without a
    fault)."""
    replay = real_replay()
    assert os.access(TRACER, os.X_OK), "tracer/trace is not built: run make"
    scratch = workload.scratch("real-used")
    trace = os.path.join(scratch, "used.log")
    subprocess.run([PAGECACHE, "evict", "-r", workload.data], check=True,
                   capture_output=True)
    # Readahead on (the kernel's default window) while recording, whatever
    # the disk's setting: it reads pages the workload never touches.
    from pagetrace.tools import packrecord, throttle
    knob = packrecord.read_ahead_file(throttle.disk_of(workload.data))
    with packrecord.read_ahead_set(128, [knob], os.path.join(scratch, "journal")):
        subprocess.run([TRACER, "--used", "-q", "-o", trace, "--", *workload.command],
                       check=True, capture_output=True, timeout=60)
    read, used = {}, {}
    with open(trace) as f:
        for line in f:
            if line.startswith("#"):
                continue
            _, path, offset, kind = line.split()[:4]
            (read if kind == "read" else used).setdefault(path, set()).add(
                int(offset) // PAGE)
    wanted = {n: read[n] & used.get(n, set()) for n in read}
    assert sum(map(len, wanted.values())) < sum(map(len, read.values()))
    out = os.path.join(scratch, "runs.csv")
    done = bench("--trace", trace, "-n", "1", "--states", "prefetched-used",
                 "--csv", out, "--replay", replay, command=workload.command)
    assert done.returncode == 0, done.stderr
    assert cached_now(wanted) == wanted


def test_concurrent_prefetches_beside_the_command(workload):
    """The replay (first-access order: no --sorted) and the command start
    together: the command runs before the 1 s replay ends, its time is the
    total, and the replay's time is reported beside it."""
    scratch = workload.scratch("concurrent")
    log, marks = os.path.join(scratch, "replay.log"), os.path.join(scratch, "cmd.log")
    slow = os.path.join(scratch, "slow-replay")
    with open(slow, "w") as f:
        f.write(SLOW_REPLAY.format(log=log))
    os.chmod(slow, 0o755)
    out = os.path.join(scratch, "runs.csv")
    done = bench("--trace", workload.used_trace, "-n", "1", "--states", "concurrent",
                 "--csv", out, "--replay", slow,
                 command=["sh", "-c", f"echo $(date +%s.%N) > {marks}"])

    assert done.returncode == 0, done.stderr
    row = read_csv(out)[0]
    assert (row["state"], row["status"]) == ("concurrent", "ok")
    assert float(row["total_s"]) == float(row["elapsed_s"]) < 0.9
    assert float(row["prefetch_s"]) >= 1.0
    with open(log) as f:
        start, end = f.read().splitlines()
    assert start.split(" ", 2)[2].startswith("--prefetch /")
    assert start.endswith("/used-pages.log")
    with open(marks) as f:
        command_ran = float(f.read())
    # Started together (either may come first by a few ms of exec), and
    # the command did not wait for the prefetch to end.
    assert abs(float(start.split()[1]) - command_ran) < 0.5
    assert command_ran < float(end.split()[1]) - 0.4


@pytest.mark.parametrize("state", ["concurrent", "concurrent-merged"])
def test_concurrent_with_the_real_replay_caches_every_used_page(workload, state):
    """Beside the command, the prefetch may lose the race for a page: the
    command then reads it, with readahead, so more than the used pages may
    be cached; but every used page is (concurrent-merged: with the real
    replay's --window, of 8K here, so that it waits many times)."""
    out = os.path.join(workload.scratch(f"{state}-real"), "runs.csv")
    done = bench("--trace", workload.used_trace, "-n", "1", "--states", state,
                 "--prefetch-window", "8K", "--csv", out, "--replay", real_replay(),
                 command=workload.command)
    assert done.returncode == 0, done.stderr
    row = read_csv(out)[0]
    assert row["status"] == "ok" and float(row["prefetch_s"]) > 0
    check_run_arithmetic(row)
    cached = cached_now(workload.intended)
    assert all(workload.intended[n] <= cached[n] for n in cached)


def test_installed_bench_finds_the_installed_replay(workload, tmp_path):
    """Installed (make install), the replayer is PREFIX/bin/pagetrace-replay,
    beside startup-bench, even when PREFIX/bin is not on PATH."""
    bindir, share = tmp_path / "bin", tmp_path / "share" / "pagetrace" / "pagetrace"
    bindir.mkdir()
    shutil.copytree(os.path.join(REPO, "analysis", "pagetrace"), share,
                    ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(BENCH, bindir / "startup-bench")
    log = tmp_path / "calls.log"
    (bindir / "pagetrace-replay").write_text(FAKE_REPLAY.format(log=log))
    os.chmod(bindir / "pagetrace-replay", 0o755)
    done = subprocess.run([str(bindir / "startup-bench"), "--trace", workload.used_trace,
                           "-n", "1", "--states", "prefetched", "--",
                           *workload.command], capture_output=True, text=True,
                          timeout=60, env=dict(os.environ, PATH="/usr/bin:/bin"))
    assert done.returncode == 0, done.stderr
    assert log.read_text() == f"--sorted --prefetch {workload.used_trace}\n"


# ---------------------------------------------------------------------------
# Refused states

def test_cold_refused_when_not_root(workload):
    out = os.path.join(workload.scratch("nobody"), "runs.csv")
    done = bench("--trace", workload.trace, "-n", "2", "--csv", out,
                 "--states", "cold,hot", command=workload.command,
                 prefix=NOBODY, timeout=60)

    assert done.returncode == 1
    assert "state cold refused: dropping the whole page cache" in done.stderr
    assert "needs root" in done.stderr
    rows = read_csv(out)
    assert [(r["state"], r["status"]) for r in rows] == [("hot", "ok")] * 2


def test_missing_replay_refuses_its_states_loudly(workload):
    out = os.path.join(workload.scratch("no-replay"), "runs.csv")
    missing = os.path.join(workload.root, "no-such-replay")
    done = bench("--trace", workload.used_trace, "-n", "1", "--csv", out, "--replay", missing,
                 "--states", "hot,prefetched,prefetched-used,concurrent,simulated",
                 command=workload.command)

    assert done.returncode == 1
    for state in ("prefetched", "prefetched-used", "concurrent", "simulated"):
        assert f"state {state} refused: needs the replayer" in done.stderr
    assert f"{missing} is not an executable file" in done.stderr
    assert [r["state"] for r in read_csv(out)] == ["hot"]


def test_used_states_refused_without_access_records(workload, tmp_path):
    """A trace without access records (here version 1) cannot say which
    pages were used: both states are refused, with how to record one, and
    the others run. Given as --used-trace, the same."""
    expected = ("needs a trace with access records (the pages the start-up used), "
                f"and {workload.trace} has none (format version 1): record one with "
                "trace --used -c CMD")
    for extra in ([], ["--used-trace", workload.trace]):
        out = str(tmp_path / f"refused{len(extra)}.csv")
        done = bench("--trace", workload.trace, *extra, "-n", "1", "--csv", out,
                     "--states", "hot,prefetched-used,concurrent",
                     "--replay", workload.fake_replay, command=workload.command)
        assert done.returncode == 1
        for state in USED_STATES:
            assert f"state {state} refused: {expected}" in done.stderr
        assert [r["state"] for r in read_csv(out)] == ["hot"]

    done = bench("--trace", workload.trace, "--used-trace", str(tmp_path / "none.log"),
                 "--states", "concurrent", command=workload.command)
    assert done.returncode == 1
    assert done.stderr.splitlines() == [
        f"startup-bench: {tmp_path / 'none.log'}: No such file or directory"]


# ---------------------------------------------------------------------------
# Run control: timeouts, readiness markers, failures, the invoking user

def test_timeout_kills_the_whole_process_group(workload):
    scratch = workload.scratch("timeout")
    out, pidfile = os.path.join(scratch, "runs.csv"), os.path.join(scratch, "pid")
    # The shell leaves a grandchild behind; the timeout must kill it too.
    script = f"sleep 300 & echo $! > {pidfile}; wait"
    started = time.monotonic()
    done = bench("--trace", workload.trace, "-n", "1", "--states", "hot",
                 "--timeout", "1", "--csv", out, command=["sh", "-c", script])

    assert time.monotonic() - started < 30
    assert done.returncode == 1
    row = read_csv(out)[0]
    assert row["status"] == "timeout"
    assert 1.0 <= float(row["elapsed_s"]) < 5.0
    with open(pidfile) as f:
        grandchild = int(f.read())
    assert not os.path.exists(f"/proc/{grandchild}"), "grandchild survived"


def test_ready_regex_ends_the_run_at_the_marker(workload):
    out = os.path.join(workload.scratch("regex"), "runs.csv")
    done = bench("--trace", workload.trace, "-n", "1", "--states", "selective",
                 "--ready-regex", r"^startup-app: ready: 40 files", "--csv", out,
                 command=workload.command + ["--hold", "60"])

    assert done.returncode == 0, done.stderr
    row = read_csv(out)[0]
    assert row["status"] == "ok"
    assert float(row["elapsed_s"]) < 5.0, "timed to the marker, not the exit"


def test_ready_file_ends_the_run_when_it_appears(workload):
    scratch = workload.scratch("ready-file")
    out, marker = os.path.join(scratch, "runs.csv"), os.path.join(scratch, "ready")
    open(marker, "w").close()  # a stale marker must be removed before the run
    done = bench("--trace", workload.trace, "-n", "1", "--states", "hot",
                 "--ready-file", marker, "--csv", out,
                 command=["sh", "-c", f"sleep 0.3; touch {marker}; sleep 60"])

    assert done.returncode == 0, done.stderr
    assert 0.3 <= float(read_csv(out)[0]["elapsed_s"]) < 5.0


def test_exit_before_the_marker_and_nonzero_exit_are_failures(workload):
    out = os.path.join(workload.scratch("failures"), "runs.csv")
    done = bench("--trace", workload.trace, "-n", "1", "--states", "hot",
                 "--ready-regex", "never printed", "--csv", out, command=workload.command)
    assert done.returncode == 1
    assert read_csv(out)[0]["status"] == "failed"
    assert "exited with status 0 before the readiness marker" in done.stderr

    done = bench("--trace", workload.trace, "-n", "1", "--states", "hot",
                 "--csv", out, command=["sh", "-c", "echo broken; exit 3"])
    assert done.returncode == 1
    assert read_csv(out)[0]["status"] == "failed"
    assert "exited with status 3; last output: broken" in done.stderr

    missing = os.path.join(workload.root, "no-such-command")
    done = bench("--trace", workload.trace, "-n", "1", "--states", "hot",
                 "--csv", out, command=[missing])
    assert done.returncode == 1
    assert read_csv(out)[0]["status"] == "failed"
    assert f"cannot run {missing}: No such file or directory" in done.stderr


def test_command_runs_as_the_sudo_user(workload):
    scratch = workload.scratch("sudo-user")
    env = dict(os.environ, SUDO_UID="65534", SUDO_GID="65534")
    done = bench("--trace", workload.trace, "-n", "1", "--states", "hot", env=env,
                 command=["sh", "-c", f"id -u > {scratch}/uid; id -g > {scratch}/gid"])

    assert done.returncode == 0, done.stderr
    with open(f"{scratch}/uid") as f, open(f"{scratch}/gid") as g:
        assert (f.read().strip(), g.read().strip()) == ("65534", "65534")
    assert "command runs as nobody (uid 65534, from SUDO_UID)" in done.stderr


# ---------------------------------------------------------------------------
# Statistics against known numbers (t quantile for 4 df: 2.776445)

KNOWN_RUNS = """run,state,iteration,status,elapsed_s,prefetch_s,total_s,cold_fraction
0,cold,0,ok,1.0,,1.0,
1,selective,0,ok,1.0,,1.0,1.0
2,hot,0,ok,0.5,,0.5,
3,prefetched,0,ok,1.9,0.5,2.4,0.9
4,simulated,0,ok,1.0,2.3,3.3,1.0
5,cold,1,ok,2.0,,2.0,
6,selective,1,ok,2.0,,2.0,1.0
7,hot,1,ok,0.5,,0.5,
8,prefetched,1,ok,1.9,0.5,2.4,0.9
9,simulated,1,ok,1.0,2.3,3.3,1.0
10,cold,2,ok,3.0,,3.0,
11,selective,2,ok,3.0,,3.0,0.5
12,selective,2,failed,100.0,,100.0,1.0
13,cold,3,ok,10.0,,10.0,
14,selective,3,ok,4.0,,4.0,1.0
15,selective,4,ok,5.0,,5.0,1.0
16,hot,2,timeout,60.0,,60.0,
"""


@pytest.mark.unit
def test_summary_statistics_against_known_numbers(tmp_path):
    runs = tmp_path / "known.csv"
    runs.write_text(KNOWN_RUNS)
    done = subprocess.run([BENCH, "--summarize", str(runs), "--json"],
                          capture_output=True, text=True, timeout=30)
    assert done.returncode == 1, "a failed and a timed-out run: exit status 1"
    report = json.loads(done.stdout)
    selective = report["summary"]["selective"]
    assert (selective["runs"], selective["ok"], selective["failed"]) == (6, 5, 1)
    assert selective["mean_s"] == pytest.approx(3.0)
    assert selective["median_s"] == pytest.approx(3.0)
    half = 2.776445 * (2.5 / 5) ** 0.5  # t(0.975, 4) * s / sqrt(n)
    assert selective["ci95_low_s"] == pytest.approx(3.0 - half, abs=1e-5)
    assert selective["ci95_high_s"] == pytest.approx(3.0 + half, abs=1e-5)
    assert selective["ci95_half_percent"] == pytest.approx(100 * half / 3.0, abs=1e-3)
    assert selective["cold_fraction_mean"] == pytest.approx(5.5 / 6)
    cold = report["summary"]["cold"]
    assert (cold["mean_s"], cold["median_s"]) == (pytest.approx(4.0), pytest.approx(2.5))
    hot = report["summary"]["hot"]
    assert (hot["ok"], hot["timeout"], hot["mean_s"]) == (2, 1, pytest.approx(0.5))
    assert hot["ci95_low_s"] == pytest.approx(0.5) == hot["ci95_high_s"]
    prefetched = report["summary"]["prefetched"]
    assert prefetched["prefetch_mean_s"] == pytest.approx(0.5)
    assert prefetched["elapsed_mean_s"] == pytest.approx(1.9)
    compared = report["comparisons"]
    assert compared["simulated_vs_selective_percent"] == pytest.approx(10.0)
    assert compared["simulated_vs_cold_percent"] == pytest.approx(-17.5)
    assert compared["prefetched_vs_selective_percent"] == pytest.approx(-20.0)
    assert compared["selective_minus_hot_s"] == pytest.approx(2.5)

    text = subprocess.run([BENCH, "--summarize", str(runs)], capture_output=True,
                          text=True, timeout=30).stdout
    assert "simulated vs real cold (selective): +10.0%" in text
    rows = {line.split()[0]: line.split() for line in text.splitlines()}
    assert rows["selective"][:6] == ["selective", "5/6", "3.000", "3.000",
                                     "1.037-4.963", "65.4"]


# Three interleaved iterations. prefetched-used recovers (0.8, 0.8, 0.7) of
# I/O costs (1.0, 1.1, 0.9): 2.3 / 3.0. concurrent recovers exactly half of
# each iteration's cost but the last, so without it its interval is the
# point itself. Iteration 3's prefetched-used failed: it pairs nothing.
GAIN_RUNS = """run,state,iteration,status,elapsed_s,prefetch_s,total_s,cold_fraction
0,selective,0,ok,2.0,,2.0,1.0
1,hot,0,ok,1.0,,1.0,
2,prefetched-used,0,ok,1.0,0.2,1.2,1.0
3,concurrent,0,ok,1.5,0.3,1.5,1.0
4,selective,1,ok,2.2,,2.2,1.0
5,hot,1,ok,1.1,,1.1,
6,prefetched-used,1,ok,1.2,0.2,1.4,1.0
7,concurrent,1,ok,1.65,0.3,1.65,1.0
8,selective,2,ok,1.9,,1.9,1.0
9,hot,2,ok,1.0,,1.0,
10,prefetched-used,2,ok,1.0,0.2,1.2,1.0
11,concurrent,2,ok,1.45,0.3,1.45,1.0
12,selective,3,ok,2.1,,2.1,1.0
13,hot,3,ok,1.0,,1.0,
14,prefetched-used,3,failed,1.0,0.2,1.2,1.0
15,concurrent,3,ok,1.6,0.3,1.6,1.0
"""
T_975_2DF = 4.302653  # t(0.975, 2); 3 paired iterations
T_975_3DF = 3.182446


def fieller_t(numerators, denominators, ratio):
    """Student's t of the paired values n - ratio * d: at either end of
    Fieller's interval it is the t quantile, exactly."""
    values = [a - ratio * b for a, b in zip(numerators, denominators)]
    n = len(values)
    mean = sum(values) / n
    var = sum((v - mean) ** 2 for v in values) / (n - 1)
    return abs(mean) / (var / n) ** 0.5


@pytest.mark.unit
def test_prefetch_gains_against_known_numbers(tmp_path):
    runs = tmp_path / "gains.csv"
    runs.write_text(GAIN_RUNS)
    done = subprocess.run([BENCH, "--summarize", str(runs), "--json"],
                          capture_output=True, text=True, timeout=30)
    assert done.returncode == 1, "a failed run: exit status 1"
    gains = json.loads(done.stdout)["comparisons"]["prefetch_gains"]
    assert set(gains) == {"prefetched-used", "concurrent"}

    used = gains["prefetched-used"]
    assert (used["iterations"], used["recovered_iterations"]) == (3, 3)
    assert used["recovered_fraction"] == pytest.approx(2.3 / 3.0)
    recovered, costs = [0.8, 0.8, 0.7], [1.0, 1.1, 0.9]
    assert used["recovered_ci95_low"] < 2.3 / 3.0 < used["recovered_ci95_high"]
    for end in (used["recovered_ci95_low"], used["recovered_ci95_high"]):
        assert fieller_t(recovered, costs, end) == pytest.approx(T_975_2DF, rel=1e-5)
    # Against selective: (1.2 + 1.4 + 1.2 - 6.1) / 6.1.
    assert used["vs_selective_percent"] == pytest.approx(100 * -2.3 / 6.1)
    changes, selective = [-0.8, -0.8, -0.7], [2.0, 2.2, 1.9]
    for end in ("low", "high"):
        ratio = used[f"vs_selective_ci95_{end}_percent"] / 100
        assert fieller_t(changes, selective, ratio) == pytest.approx(T_975_2DF, rel=1e-5)

    concurrent = gains["concurrent"]
    assert concurrent["iterations"] == 4
    assert concurrent["recovered_fraction"] == pytest.approx(
        (0.5 + 0.55 + 0.45 + 0.5) / (1.0 + 1.1 + 0.9 + 1.1))
    # Iteration 3 is not proportional: 4 iterations, 3 df, a real interval.
    for end in ("low", "high"):
        assert fieller_t([0.5, 0.55, 0.45, 0.5], [1.0, 1.1, 0.9, 1.1],
                         concurrent[f"recovered_ci95_{end}"]) == pytest.approx(
                             T_975_3DF, rel=1e-5)

    # Without iteration 3, concurrent recovers exactly half every time.
    runs.write_text("\n".join(GAIN_RUNS.splitlines()[:13]) + "\n")
    report = json.loads(subprocess.run([BENCH, "--summarize", str(runs), "--json"],
                                       capture_output=True, text=True).stdout)
    concurrent = report["comparisons"]["prefetch_gains"]["concurrent"]
    assert concurrent["recovered_fraction"] == pytest.approx(0.5)
    assert concurrent["recovered_ci95_low"] == pytest.approx(0.5)
    assert concurrent["recovered_ci95_high"] == pytest.approx(0.5)
    assert report["comparisons"]["best_prefetch_state"] == "prefetched-used"

    text = subprocess.run([BENCH, "--summarize", str(runs)], capture_output=True,
                          text=True, timeout=30).stdout
    # -1.5 / 6.1 against selective; half of the I/O cost.
    assert "concurrent (total) vs selective: -24.6% (95% CI " in text
    assert "%); recovers 50% of the I/O cost (95% CI 50 to 50%), 3 paired " \
        "iteration(s)" in text
    assert "best prefetch state: prefetched-used, recovers 77% of the I/O cost" in text


def selective_hot_prefetched(runs, iterations):
    """A runs CSV of (selective, hot, prefetched total) per iteration."""
    rows = ["run,state,iteration,status,elapsed_s,prefetch_s,total_s,cold_fraction"]
    for i, (sel, hot, pre) in enumerate(iterations):
        rows += [f"{3 * i},selective,{i},ok,{sel},,{sel},1.0",
                 f"{3 * i + 1},hot,{i},ok,{hot},,{hot},",
                 f"{3 * i + 2},prefetched,{i},ok,{pre - 0.1},0.1,{pre},1.0"]
    runs.write_text("\n".join(rows) + "\n")
    return runs


@pytest.mark.unit
def test_gain_interval_not_bounded_when_the_io_cost_is_not_clear(tmp_path):
    """selective - hot of +0.5, -0.4 and +0.1 s is not different from 0:
    no bounded interval for the share recovered, and the text says so."""
    runs = selective_hot_prefetched(tmp_path / "unclear.csv", [
        (1.5, 1.0, 1.2), (1.0, 1.4, 1.1), (1.2, 1.1, 1.0)])
    done = subprocess.run([BENCH, "--summarize", str(runs), "--json"],
                          capture_output=True, text=True, timeout=30)
    gain = json.loads(done.stdout)["comparisons"]["prefetch_gains"]["prefetched"]
    # The JSON says what the text says: no recovery figure, and why.
    assert gain["recovered_fraction"] is None and gain["io_cost_in_noise"] is True
    assert gain["recovered_ci95_low"] is None and gain["recovered_ci95_high"] is None
    text = subprocess.run([BENCH, "--summarize", str(runs)], capture_output=True,
                          text=True, timeout=30).stdout
    # A cost within the noise of a hot start gives no recovery figure, loudly.
    assert "recovers" not in text
    assert "; no recovery figure: the I/O cost is within the noise, 3 paired" in text
    [warning] = [line for line in text.splitlines() if line.startswith("WARNING")]
    assert "the I/O cost is within the noise of a hot start" in warning
    assert "sudo pagetrace trace --drop-caches --used" in warning


@pytest.mark.unit
def test_a_clear_io_cost_gives_its_recovery_figure(tmp_path):
    """The same runs with selective 1 s slower than hot: no warning."""
    runs = selective_hot_prefetched(tmp_path / "clear.csv", [
        (2.5, 1.0, 1.2), (2.4, 1.4, 1.5), (2.2, 1.1, 1.3)])
    text = subprocess.run([BENCH, "--summarize", str(runs)], capture_output=True,
                          text=True, timeout=30).stdout
    assert "WARNING" not in text and "of the I/O cost (95% CI " in text
    done = subprocess.run([BENCH, "--summarize", str(runs), "--json"],
                          capture_output=True, text=True, timeout=30)
    gain = json.loads(done.stdout)["comparisons"]["prefetch_gains"]["prefetched"]
    assert gain["io_cost_in_noise"] is False
    assert gain["recovered_fraction"] == pytest.approx((1.3 + 0.9 + 0.9) / (1.5 + 1.0 + 1.1))


def test_pack_files_are_made_cold_too(workload, tmp_path):
    """startup --pack: a file of the pack that the trace lacks (a warm
    trace misses what was cached) is evicted for the cold states too."""
    sys.path.insert(0, os.path.join(REPO, "analysis"))
    from pagetrace.core import packfile
    scratch = workload.scratch("pack")
    extra = os.path.join(scratch, "only-in-pack")
    with open(extra, "wb") as f:
        f.write(os.urandom(16 * PAGE))
    with open(extra, "rb") as f:
        f.read()
    assert len(resident_pages(extra)) == 16, "not cached: no test"
    pack = os.path.join(scratch, "app.pack")
    packfile.write(packfile.Pack(1, 4096, int(time.time()), "app", 1, 0,
                                 [packfile.identify(extra)],
                                 [packfile.PackRange(0, 0, 16, 0)]), pack)
    out = os.path.join(scratch, "runs.csv")
    done = bench("--trace", workload.trace, "--pack", pack, "-n", "1",
                 "--states", "selective", "--csv", out,
                 "--replay", workload.fake_replay, command=workload.command)
    assert done.returncode == 0, done.stderr
    # The command never reads it: cached before, cold after the run.
    assert resident_pages(extra) == set()


# ---------------------------------------------------------------------------
# Bad input

def test_bad_usage_is_refused_with_a_reason(workload, tmp_path):
    trace = ["--trace", workload.trace]
    cases = [
        ([BENCH, *trace, "-n", "1"], "the command to time"),
        ([BENCH, *trace, "--states", "cold,tepid", "--", "true"], "unknown state(s) tepid"),
        ([BENCH, "--trace", str(tmp_path / "none.log"), "--", "true"],
         "No such file or directory"),
        ([BENCH, "--trace", os.path.join(REPO, "samples", "unknown-version.log"),
          "--", "true"], "unsupported trace format version '3'"),
        ([BENCH, "--trace", os.path.join(REPO, "samples", "basic.log"), "--", "true"],
         "names no file that exists here"),
        ([BENCH, "--summarize", os.path.join(REPO, "samples", "basic.log")],
         "not a startup-bench runs CSV"),
        ([BENCH, *trace, "--fill-varying", "-1", "--", "true"],
         "--fill-varying must be 0 or more pages"),
        ([BENCH, *trace, "--prefetch-window", "1X", "--", "true"],
         "'1X': a size in bytes, K, M or G"),
    ]
    # Bad usage and unreadable inputs: 2; a trace that is refused, or that
    # names no file here, makes the job fail: 1 (docs/trace-format.md).
    statuses = [2, 2, 1, 1, 1, 2, 2, 2]
    for (argv, message), status in zip(cases, statuses):
        done = subprocess.run(argv, capture_output=True, text=True, timeout=30)
        assert done.returncode == status, (argv, done.stderr)
        assert message in done.stderr, (argv, done.stderr)
        assert "Traceback" not in done.stderr
        assert "startup-bench: startup-bench:" not in done.stderr


@pytest.mark.unit
def test_help_has_usage_and_examples():
    done = subprocess.run([BENCH, "--help"], capture_output=True, text=True)
    assert done.returncode == 0
    assert "usage: startup-bench --trace TRACE" in done.stdout
    assert "examples:" in done.stdout


def test_startup_app_is_deterministic(workload):
    first, second = (subprocess.run(workload.command, capture_output=True, text=True,
                                    check=True).stdout for _ in range(2))
    assert first == second
    assert first.startswith("startup-app: ready: 40 files, ")
    listed = [line for line in open(workload.trace) if not line.startswith("#")]
    files = {line.split()[1] for line in listed}
    assert len(files) == 40 and len(listed) > 300
