"""Shared pytest fixtures: a loop-mounted ext4 image and a tmpfs.

The tracer, replay and cache tests run against the real kernel: they load
BPF programs, mount loop devices and drop pages from the page cache, so they
need root. They fail (not skip) without it, so that a run that did not test
them cannot pass as one that did. The mounting itself lives in loopimg.py.
The tests that need no root are marked `unit`: `pytest -m unit` runs them as
any user.
"""
import contextlib
import os
import select
import subprocess
import time

import pytest

import loopimg
from loopimg import require_root  # noqa: F401  (the test modules import it from here)

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def pytest_configure(config):
    config.addinivalue_line(
        "markers", "unit: needs no root and leaves the machine alone; `pytest -m unit` runs "
        "these as a normal user")


def session_left(sid):
    """The live (not zombie) processes of session @sid, in one scan of
    /proc. One scan can miss one: a process listed that forks and ends
    before its turn (launch's middle child, which forks the prefetch)
    leaves a child that the listing had not yet; see session_ends."""
    left = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        with contextlib.suppress(OSError, IndexError):
            with open(f"/proc/{pid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            if int(fields[3]) == sid and fields[0] != "Z":
                left.append(int(pid))
    return left


def session_ends(sid, seconds):
    """Waits up to @seconds for session @sid to end; its live processes
    then. Ended: two scans in a row find none. A process that the first
    missed was forked before the parent that the scan skipped had ended,
    so the second lists it (launch's processes fork no deeper than that)."""
    deadline, empty = time.monotonic() + seconds, 0
    while empty < 2:
        left = session_left(sid)
        empty = 0 if left else empty + 1
        if left and time.monotonic() >= deadline:
            return left
        time.sleep(0.05 if left else 0)
    return []


def wait_ready(proc, tool, timeout=60):
    """Waits for TOOL's readiness line on PROC's stderr (a pipe, text mode):
    every program attached. Returns the lines before it; fails when PROC ends
    or TIMEOUT passes without it."""
    ready = f"{tool}: Tracing... Hit Ctrl-C to end.\n"
    before, deadline = [], time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not select.select([proc.stderr], [], [], deadline - time.monotonic())[0]:
            break
        line = proc.stderr.readline()
        if line == ready:
            return before
        assert line, f"{tool} ended before it was ready: {''.join(before)}"
        before.append(line)
    raise AssertionError(f"{tool}: not ready after {timeout} s: {''.join(before)}")


def output_beside_read(argv, tool, path, timeout):
    """ARGV started, ready (wait_ready, as TOOL), then PATH read through by
    cat, then ARGV left to end by itself within TIMEOUT seconds: (its exit
    status, stdout, stderr). Nothing is left running."""
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        wait_ready(proc, tool)
        subprocess.run(["cat", path], stdout=subprocess.DEVNULL, check=True)
        out, err = proc.communicate(timeout=timeout)
        return proc.returncode, out, err
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()

@pytest.fixture(scope="module")
def ext4_image():
    """A 256 MiB ext4 filesystem on a loop device; yields its mount point."""
    require_root()
    with loopimg.loop_mount("ext4", size_mib=256) as (mountpoint, _):
        yield mountpoint


@pytest.fixture
def tmpfs_dir():
    require_root()
    with loopimg.ram_mount("tmpfs") as path:
        yield path


def pytest_terminal_summary(terminalreporter):
    """The kernel matrix's minutes per guest, and its longest checks, in
    pytest's output (CI's log shows where its minutes went); and each
    kernel's random-script tallies: how many counts were compared, not only
    that none mismatched (CI keeps no docs/kernels.md)."""
    import sys
    matrix = sys.modules.get("test_kernels")
    results = getattr(matrix, "_results", None)
    if not results:
        return
    terminalreporter.section("kernel matrix: random scripts")
    for kernel, outcomes in sorted(getattr(matrix, "_outcomes", {}).items()):
        for (tool, check), (outcome, detail) in sorted(outcomes.items()):
            if tool == "cachefuzz":
                terminalreporter.write_line(f"{kernel:12} {check}: {outcome}: {detail}")
    terminalreporter.section("kernel matrix: minutes per guest")
    for name, r in results.items():
        if "guest_seconds" not in r:
            continue
        checks = sorted(((c.get("seconds", 0), check) for check, c in r.get("checks", {}).items()),
                        reverse=True)[:3]
        slowest = ", ".join(f"{check} {seconds / 60:.1f}" for seconds, check in checks)
        terminalreporter.write_line(f"{name:12} {r['guest_seconds'] / 60:5.1f} min "
                                    f"(longest checks, min: {slowest})")
        for lockup in r.get("lockups", []):
            terminalreporter.write_line(f"{name:12} a first boot locked up: {lockup}")
