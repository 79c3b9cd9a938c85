"""--cgroup PATH of trace, cachestat and cachetop, on this machine's cgroup
hierarchies (cgroup2, and a v1 controller's where the machine mounts one).

Each test makes its own cgroup below the test's own (so that no limit the
test runs under is escaped) and moves a reader into it only after the tool
has attached: a task is traced from the moment it joins, its children with
it, and nothing outside the cgroup is. Ground truth: mincore (trace), and
the pages the reader touches in files the test evicted (the cache tools).
"""
import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import textwrap
import time
import urllib.request

import pytest

from conftest import REPO, require_root
from pagecache_util import PAGE, cached_since_eviction, evict, write_file
from test_trace import TRACE, assert_trace_matches_cache
from test_trace_used import big_ra_ext4, data_dir  # noqa: F401 (fixtures)
from trace_oracle import Trace

CACHESTAT = os.path.join(REPO, "tracer", "cachestat")
CACHETOP = os.path.join(REPO, "tracer", "cachetop")
PAGETRACE = os.path.join(REPO, "scripts", "pagetrace")
KiB = 1024


def _mounts():
    """{hierarchy: mount point}: "v2", and each v1 controller."""
    found = {}
    with open("/proc/self/mountinfo") as f:
        for line in f:
            left, right = line.split(" - ")
            root, point = left.split()[3:5]
            fstype, _, options = right.split()
            if root != "/":
                continue
            if fstype == "cgroup2":
                found["v2"] = point
            elif fstype == "cgroup":
                for opt in options.split(","):
                    found[opt] = point
    return found


def _own_cgroup(hierarchy):
    """This process's cgroup in @hierarchy ("v2" or a controller)."""
    with open("/proc/self/cgroup") as f:
        for line in f:
            _, controllers, path = line.rstrip("\n").split(":", 2)
            names = controllers.split(",") if controllers else ["v2"]
            if hierarchy in names:
                return path
    raise LookupError(hierarchy)


def _leave(cgroup_dir):
    """Move every task left in @cgroup_dir to its parent, then remove it."""
    parent = os.path.dirname(cgroup_dir)
    for _ in range(50):
        with open(os.path.join(cgroup_dir, "cgroup.procs")) as f:
            pids = f.read().split()
        for pid in pids:
            try:
                with open(os.path.join(parent, "cgroup.procs"), "w") as f:
                    f.write(pid)
            except (ProcessLookupError, OSError):
                pass
        try:
            os.rmdir(cgroup_dir)
            return
        except OSError:
            time.sleep(0.1)
    raise AssertionError(f"could not remove {cgroup_dir}")


@pytest.fixture(params=["v2", "memory"])
def cgroup_dir(request):
    require_root()
    mounts = _mounts()
    if request.param not in mounts:
        pytest.skip(f"this machine mounts no {request.param} cgroup hierarchy")
    path = os.path.join(mounts[request.param] + _own_cgroup(request.param),
                        f"pagetrace-test-{os.getpid()}")
    os.mkdir(path)
    try:
        yield path
    finally:
        if os.path.isdir(path):
            _leave(path)


def attached(proc, timeout=60):
    """Waits until PROC has attached its BPF programs: it holds bpf links,
    and their number has stayed the same for 0.3 s (the tools attach them
    all in one call). Loading takes about 1 s here, much more when the
    machine is busy: a fixed sleep is not enough."""
    deadline, last, since = time.monotonic() + timeout, -1, time.monotonic()
    while time.monotonic() < deadline:
        assert proc.poll() is None, proc.communicate()[1]
        fds = f"/proc/{proc.pid}/fd"
        links = 0
        for fd in os.listdir(fds):
            with contextlib.suppress(OSError):
                links += os.readlink(os.path.join(fds, fd)) == "anon_inode:bpf_link"
        if links != last:
            last, since = links, time.monotonic()
        elif links and time.monotonic() - since >= 0.3:
            return
        time.sleep(0.05)
    raise AssertionError(f"{proc.args[0]} did not attach within {timeout} s")


def reader(join, reads_before, reads_after, child_reads=()):
    """A python that waits for a line on stdin, reads @reads_before, joins
    the cgroup @join (writes its pid to cgroup.procs), reads @reads_after,
    runs cat on @child_reads, then waits for a second line."""
    return subprocess.Popen([sys.executable, "-c", textwrap.dedent(f"""
        import os, subprocess, sys
        def read(path):
            with open(path, "rb") as f:
                while f.read(65536):
                    pass
        sys.stdin.readline()
        for path in {list(reads_before)!r}:
            read(path)
        with open({os.path.join(join, "cgroup.procs")!r}, "w") as f:
            f.write(str(os.getpid()))
        for path in {list(reads_after)!r}:
            read(path)
        for path in {list(child_reads)!r}:
            subprocess.run(["cat", path], stdout=subprocess.DEVNULL, check=True)
        print("done", flush=True)
        sys.stdin.readline()
        """)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)


def go(proc):
    proc.stdin.write("go\n")
    proc.stdin.flush()
    assert proc.stdout.readline() == "done\n"


def finish(proc):
    proc.stdin.write("end\n")
    proc.stdin.close()
    proc.wait(timeout=30)


def files(data_dir, sizes):
    paths = []
    for i, size in enumerate(sizes):
        path = os.path.join(data_dir, f"f{i}.bin")
        write_file(path, size, seed=i)
        paths.append(path)
    evict(*paths)
    return paths


def test_trace_a_task_that_joins_later_and_its_child(data_dir, cgroup_dir):
    """Recorded from the join on: exact against mincore; the reads before
    the join, and a reader outside at the same time, not at all. The trace
    ends by itself, exit 0, when the cgroup is removed."""
    before, inside, child, outside = files(data_dir, [256 * KiB, 512 * KiB, 128 * KiB, 256 * KiB])
    tracer = subprocess.Popen([TRACE, "--cgroup", cgroup_dir], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True)
    proc = reader(cgroup_dir, [before], [inside], [child])
    try:
        attached(tracer)
        subprocess.run(["cat", outside], stdout=subprocess.DEVNULL, check=True)
        go(proc)
    finally:
        finish(proc)
    _leave(cgroup_dir)
    out, err = tracer.communicate(timeout=30)
    assert tracer.returncode == 0, err
    trace = Trace(out)
    assert_trace_matches_cache(trace, inside)
    assert_trace_matches_cache(trace, child)
    assert trace.pages(before) == []
    assert trace.pages(outside) == []
    assert trace.header["command"] == "cgroup\\040" + cgroup_dir


@pytest.mark.parametrize("cgroup_dir", ["v2"], indirect=True)
def test_pack_cgroup_records_what_its_tasks_used(data_dir, cgroup_dir, tmp_path):
    """pagetrace pack --cgroup PATH -- STARTER: the starter (here a shell
    that reads one file, joins the cgroup, then reads the first 256 KiB of
    another) is traced as well as the cgroup (issue 43: the runtime's reads
    are the start's too): the pack has the second file's 64 pages the task
    used in the cgroup, and the first file's 64 pages read before."""
    outside, inside = files(data_dir, [256 * KiB, 1024 * KiB])
    pack = tmp_path / "cgroup.pack"
    starter = (f"cat {outside} > /dev/null && echo $$ > {cgroup_dir}/cgroup.procs && "
               f"exec dd if={inside} of=/dev/null bs=64k count=4 status=none")
    done = subprocess.run([sys.executable, PAGETRACE, "pack", "-q", "-n", "1", "--cgroup",
                           cgroup_dir, "-o", str(pack), "--", "sh", "-c", starter],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    exported = subprocess.run([sys.executable, PAGETRACE, "export", str(pack), "--format",
                               "nydus-prefetch"], capture_output=True, text=True, timeout=60)
    files_in = {f["path"]: f["ranges"] for f in json.loads(exported.stdout)["files"]}
    assert files_in.get(inside) == [[0, 256 * KiB]], files_in
    assert files_in.get(outside) == [[0, 256 * KiB]], files_in


@pytest.mark.parametrize("cgroup_dir", ["v2"], indirect=True)
def test_trace_cgroup_as_proc_pid_cgroup_names_it(data_dir, cgroup_dir):
    """PATH as /proc/PID/cgroup gives it, for the cgroup2 hierarchy."""
    (inside,) = files(data_dir, [128 * KiB])
    relative = cgroup_dir[len(_mounts()["v2"]):]
    tracer = subprocess.Popen([TRACE, "--cgroup", relative, "-d", "4"], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True)
    proc = reader(cgroup_dir, [], [inside])
    try:
        attached(tracer)
        go(proc)
    finally:
        finish(proc)
    out, err = tracer.communicate(timeout=30)
    assert tracer.returncode == 0, err
    assert Trace(out).page_set(inside) == set(range(32))


@pytest.mark.parametrize("tool", ["cachestat", "cachetop"])
def test_cache_tools_count_the_cgroup_only(data_dir, cgroup_dir, tool):
    """The reader reads 1 MiB cold (256 misses), then again (256 hits),
    after joining; what it read before, and a reader outside, count nothing."""
    before, inside, outside = files(data_dir, [256 * KiB, 1024 * KiB, 512 * KiB])
    command = [CACHESTAT, "-j", "--cgroup", cgroup_dir, "60", "1"] if tool == "cachestat" else \
        [CACHETOP, "-j", "--cgroup", cgroup_dir, "60", "1"]
    counter = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    proc = reader(cgroup_dir, [before], [inside, inside])
    try:
        attached(counter)
        subprocess.run(["cat", outside], stdout=subprocess.DEVNULL, check=True)
        go(proc)
        counter.send_signal(signal.SIGINT)  # the interval ends here
        out, err = counter.communicate(timeout=30)
    finally:
        finish(proc)
    assert counter.returncode == 0, err
    (line,) = out.splitlines()
    sample = json.loads(line)
    if tool == "cachestat":
        assert (sample["hits"], sample["misses"], sample["lost"]) == (256, 256, 0)
    else:
        assert [(r["pid"], r["hits"], r["misses"]) for r in sample["processes"]] == \
            [(proc.pid, 256, 256)]


@pytest.mark.parametrize("tool", ["trace", "cachestat", "cachetop"])
@pytest.mark.parametrize("path, why", [
    ("/nonexistent-cgroup", "No such file or directory"),
    ("/proc", "not a cgroup directory (nor a cgroup of the cgroup2 hierarchy)"),
])
def test_bad_cgroup_one_line_nonzero(tool, path, why):
    require_root()
    proc = subprocess.run([os.path.join(REPO, "tracer", tool), "--cgroup", path],
                          capture_output=True, text=True, timeout=30)
    assert proc.returncode == 2
    assert proc.stderr == f"{tool}: cgroup {path}: {why}\n"
    assert proc.stdout == ""


def interval_ends(counter):
    """SIGINT ends the tool's one interval: its exit 0 and its one JSON line."""
    counter.send_signal(signal.SIGINT)
    out, err = counter.communicate(timeout=30)
    assert counter.returncode == 0, err
    (line,) = out.splitlines()
    return json.loads(line)


def stopped(counter):
    """Kills COUNTER if it still runs (a test that failed before it ended)."""
    if counter.poll() is None:
        counter.kill()
        counter.wait()


@pytest.fixture
def two_v2_cgroups():
    """(parent, [a, b]): a cgroup of the cgroup2 hierarchy below the test's
    own, and two below it; removed (their tasks moved out first) on every
    path."""
    require_root()
    mounts = _mounts()
    if "v2" not in mounts:
        pytest.skip("this machine mounts no cgroup2 hierarchy")
    parent = os.path.join(mounts["v2"] + _own_cgroup("v2"), f"pagetrace-test-{os.getpid()}")
    made = []
    try:
        for path in (parent, os.path.join(parent, "a"), os.path.join(parent, "b")):
            os.mkdir(path)
            made.append(path)
        yield parent, made[1:]
    finally:
        for path in reversed(made):
            if os.path.isdir(path):
                _leave(path)


TWO_READERS_SIZES = [1024 * KiB, 512 * KiB]


@contextlib.contextmanager
def two_readers_at_once(data_dir, groups, tool):
    """The tool @tool (argv) started and attached, then two readers, each in
    its own of @groups, reading their own file (TWO_READERS_SIZES) cold then
    warm at the same time, while this test cats a third file in its own
    cgroup; yields (the tool's Popen, the readers' files) once both are
    done. The readers are ended and the tool stopped on every path."""
    paths = files(data_dir, TWO_READERS_SIZES + [256 * KiB])
    outside = paths.pop()
    counter = subprocess.Popen(tool, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    procs = [reader(group, [], [path, path]) for group, path in zip(groups, paths)]
    try:
        attached(counter)
        for proc in procs:
            proc.stdin.write("go\n")
            proc.stdin.flush()
        subprocess.run(["cat", outside], stdout=subprocess.DEVNULL, check=True)
        for proc in procs:
            assert proc.stdout.readline() == "done\n"
        yield counter, paths
    finally:
        for proc in procs:
            finish(proc)
        stopped(counter)


@pytest.mark.parametrize("scope", ["all", "--cgroup parent"])
def test_cachetop_by_cgroup_two_at_once(data_dir, two_v2_cgroups, scope):
    """Two readers, each in its own cgroup, read their own file cold then
    warm at the same time. Each cgroup's row: misses are the pages the
    kernel brought into the cache since the eviction (mincore, and
    cachestat(2)'s evictions), hits the rest of the accesses (two reads of
    the whole file); named by its path in the cgroup2 hierarchy; what the
    test itself reads meanwhile (in its own cgroup) is not theirs. With
    --cgroup PARENT, their two rows are the only ones."""
    parent, groups = two_v2_cgroups
    sizes = TWO_READERS_SIZES
    only = ["--cgroup", parent] if scope != "all" else []
    tool = [CACHETOP, "--by", "cgroup", "-j", *only, "60", "1"]
    with two_readers_at_once(data_dir, groups, tool) as (counter, paths):
        sample = interval_ends(counter)
    rows = {row["cgroup"]: row for row in sample["cgroups"]}
    v2 = _mounts()["v2"]
    if only:
        assert sorted(rows) == sorted(group[len(v2):] for group in groups)
    for group, path, size in zip(groups, paths, sizes):
        row = rows[group[len(v2):]]
        misses = len(cached_since_eviction(path))
        assert misses == size // PAGE
        assert (row["hits"], row["misses"], row["container"]) == \
            (2 * size // PAGE - misses, misses, None)
        assert row["cgroup_id"] == os.stat(group).st_ino


def _free_loopback_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _scrape(port):
    """One scrape, parsed by prometheus_client's OpenMetrics parser:
    {(sample name, labels without cgroup): value}, and the cgroup labels of
    the totals (the per-cgroup families' are in their samples' keys)."""
    from prometheus_client.openmetrics.parser import text_string_to_metric_families
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as response:
        assert response.headers["Content-Type"].startswith("application/openmetrics-text")
        text = response.read().decode()
    samples, cgroups = {}, set()
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            labels = dict(s.labels)
            if s.name.startswith("pagetrace_cache_cgroup_"):
                samples[(s.name, tuple(sorted(labels.items())))] = s.value
                continue
            cgroups.add(labels.pop("cgroup", None))
            samples[(s.name, tuple(sorted(labels.items())))] = s.value
    return samples, cgroups


def _counts(samples):
    return {name: int(samples[(f"pagetrace_cache_{name}_total", ())])
            for name in ("hits", "misses", "dirties")}


@pytest.mark.parametrize("cgroup_dir", ["v2"], indirect=True)
def test_cachestat_openmetrics_counts_equal_its_own(data_dir, cgroup_dir):
    """cachestat --cgroup --openmetrics :PORT -j: a scrape before the
    reader joins (all 0), one after its cold then warm read of 1 MiB; the
    second's counters equal cachestat's own -j line for its run, and the
    kernel's (the misses: pages brought in since eviction, mincore and
    cachestat(2)); lost events are a metric of their own (0 here)."""
    (inside,) = files(data_dir, [1024 * KiB])
    port = _free_loopback_port()
    counter = subprocess.Popen([CACHESTAT, "--cgroup", cgroup_dir, "--openmetrics", f":{port}",
                                "-j", "60", "1"],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    proc = reader(cgroup_dir, [], [inside, inside])
    try:
        attached(counter)
        first, _ = _scrape(port)
        go(proc)
        second, cgroups = _scrape(port)
        own = interval_ends(counter)
    finally:
        finish(proc)
        stopped(counter)
    misses = len(cached_since_eviction(inside))
    assert misses == 1024 * KiB // PAGE
    assert _counts(first) == {"hits": 0, "misses": 0, "dirties": 0}
    assert _counts(second) == {"hits": own["hits"], "misses": own["misses"],
                               "dirties": own["dirties"]} == \
        {"hits": misses, "misses": misses, "dirties": 0}
    assert second[("pagetrace_cache_read_hit_ratio", ())] == pytest.approx(own["read_hit_ratio"])
    lost = {k: v for k, v in second.items() if k[0] == "pagetrace_cache_lost_events_total"}
    assert len(lost) == 9 and sum(lost.values()) == own["lost"] == 0
    assert cgroups == {os.path.realpath(cgroup_dir)}


def _per_cgroup(samples):
    """{cgroup_id: {"hits", "misses", "dirties", "read_hit_ratio", "cgroup",
    "container"}} from a scrape's pagetrace_cache_cgroup_* samples."""
    rows = {}
    for (name, labels), value in samples.items():
        if not name.startswith("pagetrace_cache_cgroup_"):
            continue
        labels = dict(labels)
        row = rows.setdefault(int(labels["cgroup_id"]), {
            "cgroup": labels.get("cgroup"), "container": labels.get("container")})
        what = name[len("pagetrace_cache_cgroup_"):].removesuffix("_total")
        row[what] = value if what == "read_hit_ratio" else int(value)
    return rows


@pytest.mark.parametrize("scope", ["all", "--cgroup parent"])
def test_cachestat_openmetrics_per_cgroup_two_at_once(data_dir, two_v2_cgroups, scope):
    """cachestat --openmetrics: two readers, each in its own cgroup, read
    their own file cold then warm at the same time; each cgroup's series
    (labelled by its id, the inode of its directory, and its path in the
    cgroup2 hierarchy) count what the kernel says: misses the pages brought
    into the cache since the eviction (mincore, cachestat(2)), hits the
    rest of the two whole-file reads. What the test reads meanwhile in its
    own cgroup is not theirs. With --cgroup PARENT, theirs are the only
    series and add up to the totals."""
    parent, groups = two_v2_cgroups
    sizes = TWO_READERS_SIZES
    only = ["--cgroup", parent] if scope != "all" else []
    port = _free_loopback_port()
    tool = [CACHESTAT, "--openmetrics", f":{port}", "-j", *only, "60", "1"]
    with two_readers_at_once(data_dir, groups, tool) as (_, paths):
        samples, _ = _scrape(port)
    rows = _per_cgroup(samples)
    ids = [os.stat(group).st_ino for group in groups]
    v2 = _mounts()["v2"]
    for group, cid, path, size in zip(groups, ids, paths, sizes):
        misses = len(cached_since_eviction(path))
        assert misses == size // PAGE
        assert rows[cid] == {"cgroup": group[len(v2):], "container": None,
                             "hits": 2 * size // PAGE - misses, "misses": misses,
                             "dirties": 0, "read_hit_ratio": pytest.approx(0.5)}
    if only:
        assert sorted(rows) == sorted(ids)
        totals = _counts(samples)
        assert totals == {k: sum(r[k] for r in rows.values())
                          for k in ("hits", "misses", "dirties")}


def test_cachestat_openmetrics_port_taken_one_line():
    """The port already taken: one line naming it, non-zero, nothing loaded."""
    require_root()
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        proc = subprocess.run([CACHESTAT, "--openmetrics", f":{port}", "1", "1"],
                              capture_output=True, text=True, timeout=30)
    assert proc.returncode == 1
    assert proc.stderr == f"cachestat: 127.0.0.1:{port}: Address already in use\n"
    assert proc.stdout == ""
