"""pagetrace pack --cgroup / --container records the runtime's reads with
the target's (issue 43): the starter and its descendants, and the runtime's
daemons (found in /proc by name) with what they fork, merged into one
trace per run through the core's reader and writer.

Ground truth: the fixture files' offsets each reader reads (read_ahead_kb
is 0 while pack records, so a page read is a page used), on files evicted
first; the pack is read back with `pagetrace export`, never from pack's
own report. No trace process may outlive a pack, whether it succeeded or
its starter failed.
"""
import json
import os
import subprocess
import sys
import textwrap
import time

import pytest

from conftest import REPO
from test_cgroup import cgroup_dir, files  # noqa: F401 (fixture)
from test_trace_used import big_ra_ext4, data_dir  # noqa: F401 (fixtures)

sys.path.insert(0, os.path.join(REPO, "analysis"))
from pagetrace.core import tracefile, tracewriter  # noqa: E402
from pagetrace.tools import packruntime  # noqa: E402

PAGETRACE = os.path.join(REPO, "scripts", "pagetrace")
KiB = 1024
DAEMON = "pt43-daemon"      # the fake runtime daemon's comm (15 bytes at most)


# ---------------------------------------------------------------------------
# The merge, on traces written here.

def _trace(path, records, lost=0, columns=("pid",)):
    text = tracewriter.header(4096, columns, ("read", "access", "map"), {"command": "x y"})
    text += "".join(tracewriter.record_line(ts, p, off, (kind, *extra))
                    for ts, p, off, kind, *extra in records)
    text += tracewriter.trailer(sum(r[3] == "read" for r in records), 4096, 1, 0, lost, 0, 0)
    path.write_text(text)
    return str(path)


@pytest.mark.unit
def test_merge_keeps_each_event_once_in_time_order(tmp_path):
    """Two traces of one clock: records interleaved by time; an event both
    hold (a task both follow) once, however often the other has it; a
    page read again by the same task in one trace stays twice; the trailer
    counts what was kept, and sums what was lost."""
    a = _trace(tmp_path / "a.log", [(10, "/a", 0, "read", "7"), (30, "/a", 0, "access", "7"),
                                    (50, "/s p", 4096, "read", "8"),
                                    (60, "/s p", 4096, "read", "8")], lost=2)
    b = _trace(tmp_path / "b.log", [(20, "/b", 0, "read", "9"), (50, "/s p", 4096, "read", "8"),
                                    (55, "/a", 0, "access", "9")], lost=1)
    out = tmp_path / "merged.log"
    assert packruntime.merge_traces([a, b], str(out), "docker run x") == 6
    merged = tracefile.read(str(out), strict=True)
    assert [(r.ts_us, r.path, r.offset, r.kind, r.extras) for r in merged.records] == [
        (10, "/a", 0, "read", ["7"]), (20, "/b", 0, "read", ["9"]),
        (30, "/a", 0, "access", ["7"]), (50, "/s p", 4096, "read", ["8"]),
        (55, "/a", 0, "access", ["9"]), (60, "/s p", 4096, "read", ["8"])]
    assert merged.header.keys["command"] == "docker run x"
    assert merged.header.columns[3:] == ["kind", "pid"]
    assert {k: merged.trailer[k] for k in ("pages", "files", "lost", "accessed", "mapped",
                                           "duration_us")} == {
        "pages": 4, "files": 3, "lost": 3, "accessed": 2, "mapped": 0, "duration_us": 50}


@pytest.mark.unit
def test_merge_refuses_traces_of_other_columns(tmp_path):
    a = _trace(tmp_path / "a.log", [(1, "/a", 0, "read", "1")])
    b = _trace(tmp_path / "b.log", [(1, "/a", 0, "read", "1", "x")], columns=("pid", "comm"))
    with pytest.raises(tracefile.TraceError, match="another page size or columns"):
        packruntime.merge_traces([a, b], str(tmp_path / "m.log"), "c")


@pytest.mark.unit
def test_daemons_are_found_by_comm_or_executable():
    named = subprocess.Popen([sys.executable, "-c", "import sys, time\n"
                              f"open('/proc/self/comm', 'w').write({DAEMON!r})\n"
                              "print(flush=True); time.sleep(60)"], stdout=subprocess.PIPE)
    other = subprocess.Popen(["sleep", "60"])
    try:
        named.stdout.readline()
        assert (named.pid, DAEMON) in packruntime.daemon_pids((DAEMON,))
        exe = os.path.basename(os.path.realpath(sys.executable))
        found = packruntime.daemon_pids((exe,))
        assert (named.pid, exe) in found and os.getpid() not in {p for p, _ in found}
        assert other.pid not in {p for p, _ in packruntime.daemon_pids((DAEMON, exe))}
    finally:
        for proc in (named, other):
            proc.kill()
            proc.wait()


# ---------------------------------------------------------------------------
# pack --cgroup end to end: the starter, its child in the cgroup, a daemon.

def _exported(pack):
    done = subprocess.run([sys.executable, PAGETRACE, "export", str(pack), "--format",
                           "nydus-prefetch"], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return {f["path"]: f["ranges"] for f in json.loads(done.stdout)["files"]}


def _fake_daemon(name, path, pages, trigger, done):
    """A process named NAME that, once TRIGGER exists, forks a child that
    reads PAGES (page numbers) of PATH, waits for it, and creates DONE."""
    proc = subprocess.Popen([sys.executable, "-c", textwrap.dedent(f"""
        import os, time
        open("/proc/self/comm", "w").write({name!r})
        print(flush=True)
        while not os.path.exists({trigger!r}):
            time.sleep(0.02)
        child = os.fork()
        if child == 0:
            fd = os.open({path!r}, os.O_RDONLY)
            for page in {list(pages)!r}:
                os.pread(fd, 4096, page * 4096)
            os._exit(0)
        os.waitpid(child, 0)
        open({done!r}, "w").close()
        time.sleep(120)
    """)], stdout=subprocess.PIPE)
    proc.stdout.readline()
    return proc


def _traces_left(tmp_path):
    """The trace processes whose command line names tmp_path (the pack's
    traces write there)."""
    left = []
    for entry in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                argv = f.read().split(b"\0")
        except OSError:
            continue
        if argv[0].endswith(b"/trace") and any(str(tmp_path).encode() in a for a in argv):
            left.append(int(entry))
    return left


@pytest.mark.parametrize("cgroup_dir", ["v2"], indirect=True)
def test_pack_cgroup_records_the_starter_and_the_daemons(data_dir, cgroup_dir, tmp_path):
    """The starter reads A whole and starts the daemons' part (a trigger);
    a daemon named by --daemons forks a child that reads pages 0-7 and
    32-39 of C; a process of another name reads D at the same moment; the
    starter joins the cgroup and reads B's first 256 KiB. The pack names
    exactly A's, B's and C's pages read, and nothing of D."""
    a, b, c, d = files(data_dir, [192 * KiB, 1024 * KiB, 512 * KiB, 256 * KiB])
    trigger, done = str(tmp_path / "go"), str(tmp_path / "done")
    daemon = _fake_daemon(DAEMON, c, [*range(8), *range(32, 40)], trigger, done)
    other = _fake_daemon("pt43-other", d, range(64), trigger, str(tmp_path / "other-done"))
    pack = tmp_path / "cgroup.pack"
    starter = (f"cat {a} > /dev/null && touch {trigger} && "
               f"while [ ! -e {done} ]; do sleep 0.05; done && "
               f"echo $$ > {cgroup_dir}/cgroup.procs && "
               f"exec dd if={b} of=/dev/null bs=64k count=4 status=none")
    try:
        ran = subprocess.run([sys.executable, PAGETRACE, "pack", "-q", "-n", "1", "--cgroup",
                              cgroup_dir, "--daemons", f"dockerd,{DAEMON}",
                              "--keep-traces", str(tmp_path / "runs"), "-o", str(pack),
                              "--", "sh", "-c", starter],
                             capture_output=True, text=True, timeout=300)
    finally:
        for proc in (daemon, other):
            proc.kill()
            proc.wait()
    assert ran.returncode == 0, ran.stderr
    packed = _exported(pack)
    assert packed.get(a) == [[0, 192 * KiB]], packed
    assert packed.get(b) == [[0, 256 * KiB]], packed
    assert packed.get(c) == [[0, 32 * KiB], [128 * KiB, 32 * KiB]], packed
    assert d not in packed
    parts = sorted(os.listdir(tmp_path / "runs"))
    assert parts == sorted(["run-1.log", "run-1.starter.log", "run-1.target.log",
                            f"run-1.{DAEMON}-{daemon.pid}.log"])
    assert _traces_left(tmp_path) == []


@pytest.mark.parametrize("cgroup_dir", ["v2"], indirect=True)
def test_a_failed_starter_leaves_no_trace_running(data_dir, cgroup_dir, tmp_path):
    """The starter reads A and fails: pack says so in one line, exit 1,
    no pack, and neither the daemon's, the target's nor the starter's
    trace is left running."""
    (a,) = files(data_dir, [64 * KiB])
    daemon = _fake_daemon(DAEMON, a, [0], str(tmp_path / "never"), str(tmp_path / "d"))
    pack = tmp_path / "failed.pack"
    try:
        started = time.monotonic()
        ran = subprocess.run([sys.executable, PAGETRACE, "pack", "-q", "-n", "1", "--cgroup",
                              cgroup_dir, "--daemons", DAEMON, "-o", str(pack),
                              "--", "sh", "-c", f"cat {a} > /dev/null; exit 7"],
                             capture_output=True, text=True, timeout=300)
        left = _traces_left(tmp_path)
    finally:
        daemon.kill()
        daemon.wait()
    assert ran.returncode == 1 and not pack.exists()
    assert ran.stderr.strip().splitlines() == [
        "pagetrace pack: sh exited with status 7: the target's start failed"]
    assert left == [] and time.monotonic() - started < 120


@pytest.mark.parametrize("cgroup_dir", ["v2"], indirect=True)
def test_an_interrupted_pack_leaves_nothing_running(cgroup_dir, tmp_path):
    """SIGTERM to pack while the starter runs (a daemon's trace, the
    target's and the starter's attached): exit 130, no pack, no trace
    left, and the starter itself stopped by its trace."""
    marker = f"sleep 59.{os.getpid()}"
    daemon = _fake_daemon(DAEMON, "/dev/null", [], str(tmp_path / "never"), str(tmp_path / "d"))
    runs = tmp_path / "runs"
    pack = subprocess.Popen([sys.executable, PAGETRACE, "pack", "-q", "-n", "1", "--cgroup",
                             cgroup_dir, "--daemons", DAEMON, "--keep-traces", str(runs),
                             "-o", str(tmp_path / "p.pack"), "--", "sh", "-c",
                             f"exec {marker}"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 120
        while not (runs / "run-1.starter.log").exists() and time.monotonic() < deadline:
            time.sleep(0.1)
        time.sleep(1)
        pack.send_signal(15)
        _, err = pack.communicate(timeout=120)
        left = _traces_left(tmp_path)
        starters = subprocess.run(["pgrep", "-f", marker], capture_output=True, text=True)
    finally:
        daemon.kill()
        daemon.wait()
        if pack.poll() is None:
            pack.kill()
            pack.wait()
    assert pack.returncode == 130, err
    assert "interrupted" in err and not (tmp_path / "p.pack").exists()
    assert left == [] and starters.stdout == ""
