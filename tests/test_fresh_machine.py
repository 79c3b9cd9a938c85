"""The tools on a fresh machine: no tracefs, no debugfs, RLIMIT_MEMLOCK fixed.

A minimal VM or a container often has neither tracefs nor debugfs mounted,
and there bpftrace reports only "tracepoint not found". tests/without-tracefs
recreates that machine in a private mount namespace; these tests first prove
that the namespace really lacks tracefs (plain bpftrace fails in it), then
that tracer/trace and tracer/readpage work in it, and that readpage leaves
the system's mounts as they were. These are the fresh machine's cases of
the suite: .ci/run runs the suite once, as installed (tracefs mounted by
scripts/install-deps), and every tool that loads BPF is run here once more
without tracefs.
"""
import json
import os
import shutil
import subprocess
import sys

import pytest

from conftest import REPO, require_root
from pagecache_util import cached_since_eviction, evict, write_file
from trace_oracle import Trace
from test_trace_used import UsedTrace

WITHOUT_TRACEFS = os.path.join(REPO, "tests", "without-tracefs")
READPAGE = os.path.join(REPO, "tracer", "readpage")
TRACE = os.path.join(REPO, "tracer", "trace")
MiB = 1 << 20
# RLIMIT_MEMLOCK as a container or a locked-down machine sets it: 64 KiB,
# soft and hard, so that nothing can raise it.
LOW_MEMLOCK = ["prlimit", "--memlock=65536:65536"]


def run(*cmd, timeout=120):
    require_root()
    return subprocess.run(list(cmd), capture_output=True, text=True,
                          errors="surrogateescape", timeout=timeout)


def tracing_mounts(mounts_text):
    return [line for line in mounts_text.splitlines()
            if line.split()[2:3] in (["tracefs"], ["debugfs"])]


@pytest.fixture
def data_file(ext4_image, request):
    path = os.path.join(ext4_image, request.node.name)
    os.makedirs(path, exist_ok=True)
    f = os.path.join(path, "data.bin")
    write_file(f, 2 * MiB)
    evict(f)
    yield f
    shutil.rmtree(path, ignore_errors=True)


def test_without_tracefs_unmounts_tracefs_and_debugfs():
    # Mount both in a private namespace first, so that the helper has
    # something to remove whatever this machine has mounted.
    # (A second mount of the same tracefs on the same place is refused, so
    # mount only where nothing is mounted yet.)
    script = ("{ mountpoint -q /sys/kernel/tracing || mount -t tracefs nodev /sys/kernel/tracing; } && "
              "{ mountpoint -q /sys/kernel/debug || mount -t debugfs nodev /sys/kernel/debug; } && "
              "grep -cE ' (tracefs|debugfs) ' /proc/self/mounts && "
              f"exec {WITHOUT_TRACEFS} cat /proc/self/mounts")
    done = run("unshare", "--mount", "--propagation", "private", "sh", "-c", script)
    assert done.returncode == 0, done.stderr
    before, after = done.stdout.split("\n", 1)
    assert int(before) >= 2
    assert tracing_mounts(after) == []


def test_plain_bpftrace_fails_without_tracefs():
    """The namespace is really a fresh machine: the failure users report."""
    done = run(WITHOUT_TRACEFS, "bpftrace", "-e",
               "tracepoint:sched:sched_process_fork { exit(); }")
    assert done.returncode != 0
    assert "tracepoint not found" in done.stderr


def test_trace_needs_no_tracefs(data_file):
    done = run(WITHOUT_TRACEFS, *LOW_MEMLOCK, TRACE, "--", "cat", data_file)
    assert done.returncode == 0, done.stderr
    trace = Trace(done.stdout)
    assert trace.page_set(data_file)
    assert set(trace.pages(data_file)) == cached_since_eviction(data_file)


def test_trace_used_needs_no_tracefs(data_file):
    # The fault path attaches what trace alone does not (page faults, the
    # filemap events, system calls): none of it through tracefs either.
    touched = [3, 200, 480]
    script = ("import mmap, os; m = mmap.mmap(os.open(%r, os.O_RDONLY), 0, prot=mmap.PROT_READ); "
              "[m[p * 4096] for p in %r]" % (data_file, touched))
    done = run(WITHOUT_TRACEFS, *LOW_MEMLOCK, TRACE, "--used", "--", sys.executable, "-c", script)
    assert done.returncode == 0, done.stderr
    trace = UsedTrace(done.stdout)
    assert ", used)" in trace.header["tracer"]
    assert trace.kind_set(data_file, "access") == set(touched)
    assert trace.kind_set(data_file, "read") == cached_since_eviction(data_file)
    assert trace.trailer["lost"] == "0"


def test_cache_tools_need_no_tracefs_and_no_memlock_headroom():
    # cachestat and cachetop load their BPF like trace does: no tracefs, and
    # a low RLIMIT_MEMLOCK that cannot be raised must not matter.
    in_ns = [os.path.join(REPO, "tests", "without-tracefs"), *LOW_MEMLOCK]
    stat = run(*in_ns, os.path.join(REPO, "tracer", "cachestat"), "-j", "0.2", "1")
    assert stat.returncode == 0, stat.stderr
    assert "hits" in json.loads(stat.stdout.splitlines()[0])
    top = run(*in_ns, os.path.join(REPO, "tracer", "cachetop"), "-j", "-c", "cat /etc/hostname")
    assert top.returncode == 0, top.stderr
    assert json.loads(top.stdout)["lost"] == 0
    assert "MEMLOCK" not in stat.stderr + top.stderr


def test_readpage_mounts_tracefs_privately(data_file):
    with open("/proc/self/mounts") as f:
        mounts_before = tracing_mounts(f.read())
    done = run(WITHOUT_TRACEFS, *LOW_MEMLOCK, READPAGE, "-c", f"/bin/cat {data_file}")
    assert done.returncode == 0, done.stderr
    # Nothing about RLIMIT_MEMLOCK: it cannot be raised, and need not be.
    assert "RLIMIT_MEMLOCK" not in done.stderr
    trace = Trace(done.stdout)
    assert trace.header["pagetrace-format"] == "1"
    assert trace.trailer["lost"] == "0"
    # readpage.bt tells reads from writes by readahead windows, which can
    # miss a folio that trace's bio walk sees (docs/tracer.md); exact
    # agreement with trace is tests/test_trace.py's job. Here: it ran, and
    # everything it recorded was really read.
    recorded = set(trace.pages(data_file))
    assert recorded and recorded <= cached_since_eviction(data_file)
    with open("/proc/self/mounts") as f:
        assert tracing_mounts(f.read()) == mounts_before


def test_readpage_writes_output_file(data_file, tmp_path):
    out = tmp_path / "reads.log"
    done = run(WITHOUT_TRACEFS, READPAGE, "-o", str(out), "-c", f"/bin/cat {data_file}")
    assert done.returncode == 0, done.stderr
    assert done.stdout == ""
    assert Trace(out.read_text()).page_set(data_file)


@pytest.mark.parametrize("args, message", [
    ([], "readpage: no command: give -c 'CMD ARGS' (see --help)"),
    (["--bogus"], "readpage: --bogus: unknown argument (see --help)"),
    (["-c"], "readpage: -c: needs a command"),
])
def test_readpage_bad_usage(args, message):
    done = run(READPAGE, *args)
    assert done.returncode == 1
    assert done.stderr.strip() == message


def test_readpage_refuses_non_root():
    done = run("setpriv", "--reuid=65534", "--regid=65534", "--clear-groups",
               READPAGE, "-c", "/bin/true")
    assert done.returncode == 1
    assert done.stderr.strip() == (
        "readpage: must run as root (bpftrace loads BPF programs): try sudo")


def test_readpage_help_and_version():
    assert "EXAMPLES" in run(READPAGE, "--help").stdout.upper()
    version = run(READPAGE, "--version")
    assert version.returncode == 0 and version.stdout.startswith("readpage ")


def test_bpftrace_failure_is_an_error():
    # A command bpftrace cannot start: bpftrace fails, and so must readpage.
    done = run(WITHOUT_TRACEFS, READPAGE, "-c", "/nonexistent/command")
    assert done.returncode == 1
    assert done.stderr.strip()
