"""tracer/cachetop and tracer/cachestat against ground truth that the test
itself decides: which pages are cold (evicted, checked with mincore), which
are cached (locked with mlock so that DAMON cannot reclaim them), and which
pages the workload touches. Files live on a loop-mounted ext4 whose loop
device has a large read_ahead_kb, so readahead reads far more than is
touched: only accesses count, never what readahead brought in.
"""
import contextlib
import fcntl
import glob
import json
import os
import shlex
import shutil
import signal
import subprocess
import sys
import textwrap
import time

import pytest

from conftest import REPO, output_beside_read, require_root, wait_ready
from pagecache_util import PAGE, cold_file, evict, locked_in_cache, resident_pages, write_file
from test_trace_used import (big_ra_ext4, data_dir,  # noqa: F401 (fixtures)
                             batch_ending_in_flight, IN_FLIGHT_PAGES)

CACHETOP = os.path.join(REPO, "tracer", "cachetop")
CACHESTAT = os.path.join(REPO, "tracer", "cachestat")
MiB = 1 << 20
PAGES_8M = 8 * MiB // PAGE


def cachetop_c(command, *args, check_rc=0):
    """Runs cachetop -j -c COMMAND; returns its JSON summary."""
    require_root()
    assert os.access(CACHETOP, os.X_OK), "tracer/cachetop is not built: run make"
    proc = subprocess.run([CACHETOP, "-j", *args, "-c", command], capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == check_rc, proc.stderr
    summary = json.loads(proc.stdout)
    assert summary["lost"] == 0, proc.stderr
    return summary


def file_row(summary, path):
    rows = [f for f in summary["files"] if f["path"] == path]
    assert len(rows) <= 1
    return rows[0] if rows else {"hits": 0, "misses": 0, "mapped": 0, "dirties": 0}


def counts(row):
    return row["hits"], row["misses"]


def python(code):
    return f"{sys.executable} -c '{textwrap.dedent(code)}'"


def written(path, size):
    """Python code (for python()) that writes SIZE bytes to PATH and syncs
    them: SIZE / 4096 pages dirtied, then written back."""
    return textwrap.dedent(f"""
        import os
        with open("{path}", "wb") as fh:
            fh.write(bytes(range(256)) * {size // 256})
            fh.flush()
            os.fsync(fh.fileno())
        """)


def _cat_and_libraries():
    cat = shutil.which("cat")
    listed = subprocess.run(["ldd", cat], capture_output=True, text=True, check=True).stdout
    libraries = [word for line in listed.splitlines() for word in line.split()
                 if word.startswith("/")]
    # The loader's cache and the locale's files are read at start too
    # (C.UTF-8 is a directory of LC_* files, not the archive).
    others = [p for p in ("/etc/ld.so.cache", "/etc/locale.alias",
                          "/usr/lib/locale/locale-archive",
                          *sorted(glob.glob("/usr/lib/locale/*/LC_*")))
              if os.path.isfile(p) and os.path.getsize(p)]
    return [os.path.realpath(p) for p in [cat, *libraries, *others]]


CAT_AND_LIBRARIES = _cat_and_libraries()


def test_cold_then_warm_cat(data_dir):
    f = cold_file(data_dir, "cat.bin", 8 * MiB)
    # Per process, cat's only misses must be the file's: its binary and
    # libraries are held in the cache (mlock), since DAMON on this VM may
    # reclaim them between tests.
    with contextlib.ExitStack() as held:
        for path in CAT_AND_LIBRARIES:
            held.enter_context(locked_in_cache(path))
        cold = cachetop_c(f"cat {f} > /dev/null")
    assert counts(file_row(cold, f)) == (0, PAGES_8M)
    assert file_row(cold, f)["read_hit_ratio"] == 0
    (cat,) = [p for p in cold["processes"] if p["comm"] == "cat"]
    assert cat["misses"] == PAGES_8M
    with locked_in_cache(f):
        assert resident_pages(f) == set(range(PAGES_8M))
        warm = cachetop_c(f"cat {f} > /dev/null")
    assert counts(file_row(warm, f)) == (PAGES_8M, 0)
    assert file_row(warm, f)["read_hit_ratio"] == 1


def test_one_cached_one_cold_is_half(data_dir):
    cached = os.path.join(data_dir, "cached.bin")
    cold = os.path.join(data_dir, "cold.bin")
    write_file(cached, 4 * MiB)
    write_file(cold, 4 * MiB, seed=3)
    evict(cold)
    with locked_in_cache(cached):
        summary = cachetop_c(f"cat {cached} {cold} > /dev/null")
    hits = file_row(summary, cached)["hits"] + file_row(summary, cold)["hits"]
    misses = file_row(summary, cached)["misses"] + file_row(summary, cold)["misses"]
    assert (hits, misses) == (1024, 1024)
    assert hits / (hits + misses) == 0.5


def test_batch_returned_without_its_tracepoint(data_dir, tmp_path):
    """The cached pages of a read whose first batch ends on a page in flight
    are hits (filemap_get_pages()'s error path fires no tracepoint); the
    pages in flight, read from storage while cachetop runs, are misses."""
    with batch_ending_in_flight(data_dir, tmp_path) as (f, program, _):
        summary = cachetop_c(f"{sys.executable} -c {shlex.quote(program)}")
    assert counts(file_row(summary, f)) == (IN_FLIGHT_PAGES, IN_FLIGHT_PAGES)


def test_written_evicted_read_back_is_all_misses(data_dir):
    f = os.path.join(data_dir, "written.bin")
    summary = cachetop_c(python(written(f, 4 * MiB) + textwrap.dedent(f"""
        fd = os.open("{f}", os.O_RDONLY)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        while os.read(fd, 1 << 20):
            pass
        """)))
    row = file_row(summary, f)
    assert counts(row) == (0, 1024)
    assert row["read_hit_ratio"] == 0
    assert row["dirties"] == 1024


def test_writes_are_dirties_not_misses(data_dir):
    f = os.path.join(data_dir, "dirty.bin")
    summary = cachetop_c(python(written(f, 8 * MiB)))
    row = file_row(summary, f)
    assert row["dirties"] == PAGES_8M
    assert counts(row) == (0, 0)


SCATTERED = [i * 1500 + 7 for i in range(10)]


def test_scattered_preads_cold_then_warm(data_dir):
    f = cold_file(data_dir, "preads.bin", 64 * MiB)
    code = f"""
        import os
        fd = os.open("{f}", os.O_RDONLY)
        for page in {SCATTERED!r}:
            assert len(os.pread(fd, {PAGE}, page * {PAGE})) == {PAGE}
        """
    cold = cachetop_c(python(code))
    assert counts(file_row(cold, f)) == (0, 10)
    with locked_in_cache(f):
        warm = cachetop_c(python(code))
    assert counts(file_row(warm, f)) == (10, 0)


def test_mmap_touches_cold_then_warm(data_dir):
    f = cold_file(data_dir, "touches.bin", 64 * MiB)
    touched = [i * 2048 + 100 for i in range(8)]  # 8 MiB apart
    code = f"""
        import mmap, os
        fd = os.open("{f}", os.O_RDONLY)
        m = mmap.mmap(fd, 0, prot=mmap.PROT_READ)
        for page in {touched!r}:
            m[page * {PAGE}]
        """
    cold = cachetop_c(python(code))
    assert counts(file_row(cold, f)) == (0, 8)
    assert len(resident_pages(f)) > 8, "read-around read only the touched pages"
    with locked_in_cache(f):
        warm = cachetop_c(python(code))
    assert counts(file_row(warm, f)) == (8, 0)


def test_json_summary_shape(data_dir):
    f = os.path.join(data_dir, "shape.bin")
    write_file(f, 1 * MiB)
    summary = cachetop_c(f"sh -c 'cat {f} > /dev/null'; exit 3", check_rc=3)
    assert summary["exit_status"] == 3
    for key in ("hits", "misses", "mapped", "dirties", "read_hit_ratio", "processes", "files"):
        assert key in summary
    assert summary["hits"] == sum(p["hits"] for p in summary["processes"])
    assert summary["misses"] == sum(p["misses"] for p in summary["processes"])
    assert summary["hits"] == sum(x["hits"] for x in summary["files"])
    assert 0 <= summary["read_hit_ratio"] <= 1
    assert {"sh", "cat"} <= {p["comm"] for p in summary["processes"]}


def test_json_of_names_that_are_not_utf8(data_dir):
    """A file's path and a process's comm are bytes: cachetop -j writes them
    as lib/json.c does, a byte that is not part of valid UTF-8 as \\udcXX
    (the path escaped as in the trace first, docs/trace-format.md). The
    output is valid UTF-8 and JSON, read as cachefuzz.py reads it (text,
    json.loads), and gives back the bytes with os.fsencode()."""
    require_root()
    name = b"caf\xe9 \xff\"q\\.bin"
    f = os.path.join(os.fsencode(data_dir), name)
    write_file(os.fsdecode(f), 64 * 1024)
    evict(os.fsdecode(f))
    comm = os.path.join(os.fsencode(data_dir), b"c\xfeat")
    shutil.copy(shutil.which("cat"), os.fsdecode(comm))
    command = f"{shlex.quote(os.fsdecode(comm))} {shlex.quote(os.fsdecode(f))} > /dev/null"
    proc = subprocess.run([CACHETOP, "-j", "-c", command], capture_output=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    summary = json.loads(proc.stdout.decode("utf-8"))   # strict UTF-8
    escaped = os.fsencode(data_dir) + b"/caf\xe9\\040\xff\"q\\134.bin"
    rows = [r for r in summary["files"] if os.fsencode(r["path"]) == escaped]
    assert [(r["hits"], r["misses"]) for r in rows] == [(0, 16)]
    assert b"c\xfeat" in {os.fsencode(p["comm"]) for p in summary["processes"]}
    assert b"\\udcff" in proc.stdout and b"\\udcfe" in proc.stdout


def test_cachestat_counts_a_cold_read(data_dir):
    """System-wide, so other work adds to it: at least the file's misses."""
    require_root()
    f = cold_file(data_dir, "stat.bin", 8 * MiB)
    # The interval starts once cachestat is attached, which it says: the
    # read lands in it however long loading takes.
    status, out, err = output_beside_read([CACHESTAT, "-j", "5", "1"], "cachestat", f, 30)
    assert status == 0, err
    (line,) = out.splitlines()
    sample = json.loads(line)
    assert sample["misses"] >= PAGES_8M
    assert 0 <= sample["read_hit_ratio"] <= 1
    assert sample["cached_mb"] > 0


@pytest.mark.parametrize("tool,args,message", [
    ("cachetop", ["-p", "999999999"], "cachetop: -p: 999999999: no such process"),
    ("cachetop", ["-c", "no-such-command-xyz --flag"],
     "cachetop: -c: no-such-command-xyz: command not found"),
    ("cachetop", ["0"], "cachetop: INTERVAL: '0' is not a number of seconds above 0"),
    ("cachetop", ["--", "-2"], "cachetop: INTERVAL: '-2' is not a number of seconds above 0"),
    ("cachestat", ["0"], "cachestat: INTERVAL: '0' is not a number of seconds above 0"),
    ("cachestat", ["--", "-1"], "cachestat: INTERVAL: '-1' is not a number of seconds above 0"),
    ("cachestat", ["1", "0"], "cachestat: COUNT: '0' is not a whole number above 0"),
])
def test_bad_input_one_line_nonzero_exit(tool, args, message):
    require_root()
    proc = subprocess.run([os.path.join(REPO, "tracer", tool), *args], capture_output=True,
                          text=True, timeout=30)
    assert proc.returncode != 0
    assert proc.stderr == message + "\n"
    assert proc.stdout == ""


@pytest.mark.parametrize("tool", ["cachetop", "cachestat"])
def test_not_root(tool):
    require_root()
    proc = subprocess.run(["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups",
                           os.path.join(REPO, "tracer", tool), "1", "1"],
                          capture_output=True, text=True, timeout=30)
    assert proc.returncode == 1
    assert proc.stderr == f"{tool}: needs root (it loads BPF programs): run it with sudo\n"


@pytest.mark.unit
@pytest.mark.parametrize("tool", ["cachetop", "cachestat"])
def test_help_and_version(tool):
    path = os.path.join(REPO, "tracer", tool)
    helped = subprocess.run([path, "--help"], capture_output=True, text=True)
    assert helped.returncode == 0 and "EXAMPLES:" in helped.stdout
    version = subprocess.run([path, "-V"], capture_output=True, text=True)
    assert version.returncode == 0 and version.stdout.startswith(f"{tool} (pagetrace) ")


def test_cachetop_pid_follows_one_process(data_dir):
    """-p: only that process, counted per interval."""
    require_root()
    f = cold_file(data_dir, "pid.bin", 1 * MiB)
    reader = subprocess.Popen([sys.executable, "-c", textwrap.dedent(f"""
        import sys
        sys.stdin.readline()
        with open("{f}", "rb") as fh:
            while fh.read(65536):
                pass
        sys.stdin.readline()
        """)], stdin=subprocess.PIPE, text=True)
    try:
        top = subprocess.Popen([CACHETOP, "-j", "-p", str(reader.pid), "6", "1"],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        wait_ready(top, "cachetop")
        reader.stdin.write("go\n")
        reader.stdin.flush()
        out, err = top.communicate(timeout=30)
    finally:
        reader.stdin.write("done\n")
        reader.stdin.close()
        reader.wait(timeout=30)
    assert top.returncode == 0, err
    (line,) = out.splitlines()
    rows = json.loads(line)["processes"]
    assert [r["pid"] for r in rows] == [reader.pid]
    assert (rows[0]["hits"], rows[0]["misses"]) == (0, 256)


def blocked_in_pipe_write(pid, timeout=30):
    """Waits until @pid sleeps in a write to a full pipe (its wchan)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with open(f"/proc/{pid}/wchan") as f:
            if "pipe_write" in f.read():
                return True
        time.sleep(0.05)
    return False


@pytest.mark.parametrize("tool", ["cachetop", "cachestat"])
def test_a_stop_signal_during_a_blocked_write_loses_no_line(tool):
    """The reader falls behind: stdout, a pipe of one page, fills and the
    tool sleeps in write(). SIGINT then must not cut the output: the write
    finishes once the reader reads, the last interval is printed, exit 0,
    and every line is whole JSON (a write failed with EINTR would end the
    tool with exit 1 or leave half a line)."""
    require_root()
    r, w = os.pipe()
    fcntl.fcntl(w, fcntl.F_SETPIPE_SZ, PAGE)
    proc = subprocess.Popen([os.path.join(REPO, "tracer", tool), "-j", "0.02"], stdout=w,
                            stderr=subprocess.PIPE, text=True)
    os.close(w)
    try:
        wait_ready(proc, tool)
        blocked = blocked_in_pipe_write(proc.pid)
        proc.send_signal(signal.SIGINT)
        time.sleep(0.3)
        with os.fdopen(r, "rb") as reader:
            out = reader.read().decode()
        err = proc.stderr.read()
        proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert blocked, f"{tool} never filled the pipe"
    assert proc.returncode == 0, err
    lines = out.splitlines()
    assert len(out) > PAGE and out.endswith("\n")
    assert all(json.loads(line)["time"] for line in lines)


@pytest.mark.parametrize("tool", ["cachetop", "cachestat"])
def test_a_reader_gone_is_one_line_and_exit_1(tool):
    """`tool -j 0.02 | head -1`: once the reader is gone the tool says so
    in one line and exits 1 within a few intervals, not killed by SIGPIPE
    and not running on unseen."""
    require_root()
    proc = subprocess.Popen([os.path.join(REPO, "tracer", tool), "-j", "0.02"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        wait_ready(proc, tool)
        json.loads(proc.stdout.readline())
        proc.stdout.close()
        proc.wait(timeout=10)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 1
    assert proc.stderr.read().splitlines()[-1] == f"{tool}: stdout: Broken pipe"
