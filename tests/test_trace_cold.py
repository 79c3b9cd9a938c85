"""trace --drop-caches and cachetop -c --drop-caches start the command from
a cold page cache; a trace of a warm start says so, in one line, with the
command that traces a cold one. Ground truth: mincore (loopimg.resident_pages)
and the pages the file holds."""
import json
import os
import shutil
import subprocess

import pytest

import loopimg
from conftest import REPO
from trace_oracle import Trace

TRACE = os.path.join(REPO, "tracer", "trace")
CACHETOP = os.path.join(REPO, "tracer", "cachetop")
PAGE = 4096
SIZE = 2 << 20


@pytest.fixture(scope="module")
def fs():
    loopimg.require_root()
    with loopimg.loop_mount("ext4", 64, ("-q", "-F", "-b", "4096")) as (mnt, _):
        data = os.path.join(mnt, "data")
        loopimg.write_file(data, SIZE, seed=5)
        program = os.path.join(mnt, "cat")
        shutil.copy("/bin/cat", program)
        yield data, program


def trace(tmp_path, *args):
    out = tmp_path / "t.log"
    proc = subprocess.run([TRACE, "-o", str(out), *args],
                          capture_output=True, timeout=120)
    proc.stderr = proc.stderr.decode(errors="replace")
    return proc, Trace(out.read_text(errors="surrogateescape")) \
        if out.exists() else None


def warm_lines(stderr):
    return [line for line in stderr.splitlines() if "warm" in line]


def make_warm(*paths):
    for path in paths:
        with open(path, "rb") as f:
            while f.read(1 << 20):
                pass
        assert len(loopimg.resident_pages(path)) == \
            -(-os.path.getsize(path) // PAGE), "not all cached: no warm case"


def test_warm_used_trace_says_so(fs, tmp_path):
    data, program = fs
    make_warm(data, program)
    proc, t = trace(tmp_path, "--used", "--", program, data)
    assert proc.returncode == 0, proc.stderr
    accesses = [r for r in t.records if r[3][0] == "access" and r[1] == data]
    # Every page of the file was cached before: every access was a hit.
    assert len(accesses) == SIZE // PAGE
    [line] = warm_lines(proc.stderr)
    assert line.startswith("trace: warm: at least ")
    claimed = int(line.split()[4])
    reads = {(p, o) for _, p, o, _ in t.read_records}
    hits = [r for r in t.records if r[3][0] == "access"
            and (r[1], r[2]) not in reads]
    # The line's figure is a lower bound, and true.
    assert 0 < claimed <= len(hits)
    assert "sudo pagetrace trace --drop-caches --used ..." in line


def test_warm_plain_trace_says_so(fs, tmp_path):
    data, program = fs
    make_warm(data, program)
    proc, _ = trace(tmp_path, "--", program, data)
    assert proc.returncode == 0, proc.stderr
    assert warm_lines(proc.stderr) == [
        "trace: warm: the program started was already cached (none of its "
        "pages read); trace a cold start with: sudo pagetrace trace "
        "--drop-caches ..."]


@pytest.mark.parametrize("used", [[], ["--used"]])
def test_drop_caches_traces_a_cold_start(fs, tmp_path, used):
    data, program = fs
    make_warm(data, program)
    proc, t = trace(tmp_path, "--drop-caches", *used, "--", program, data)
    assert proc.returncode == 0, proc.stderr
    assert warm_lines(proc.stderr) == []
    # Cached before, read from storage under trace: every page of both.
    read = {(p, o) for _, p, o, _ in t.read_records}
    assert {(data, o) for o in range(0, SIZE, PAGE)} <= read
    assert any(p == program for p, _ in read)


def test_cachetop_drop_caches_counts_a_cold_start(fs):
    data, program = fs
    make_warm(data, program)
    proc = subprocess.run([CACHETOP, "--drop-caches", "-j", "-c",
                           f"{program} {data} > /dev/null"],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    row = json.loads(proc.stdout)
    # The file's pages all missed (readahead may add the program's).
    assert row["misses"] >= SIZE // PAGE


@pytest.mark.parametrize("argv, message", [
    ([TRACE, "--drop-caches", "-p", "1", "-d", "1"],
     "trace: --drop-caches needs a command to start (-c or --): what "
     "already runs has its pages\n"),
    ([CACHETOP, "--drop-caches"],
     "cachetop: --drop-caches needs -c: it empties the cache before CMD\n"),
])
def test_drop_caches_needs_a_command(argv, message):
    loopimg.require_root()
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and proc.stderr == message
