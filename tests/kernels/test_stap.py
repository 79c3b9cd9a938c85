"""readpage.stp in the kernel matrix (make test-stap): for each kernel of
PAGETRACE_STAP_KERNELS (default 6.1 6.12 7.3), tracer/readpage-stap compiles
the module on the host for the kernel's release, with systemtap 5.1 and the
kernel's headers (tests/kernels/stapkit.py fetches both; modules are cached
by script hash and release, so a run compiles only what changed), then the
kernel boots under qemu and tests/kernels/stap_guest.py runs readpage.bt's
two checks (guest_checks.py: a cold read() of 8 MiB, 64 random mmap
faults) under readpage-stap. Outcomes, as test_kernels.py's:
  passed   the module's pages of the file equal the kernel's ground truth
           (mincore; cachestat(2) where the kernel has it);
  refused  the module cannot be built for this kernel, or it could record
           nothing on it: one line says which and why, exit non-zero,
           nothing recorded (checked, not assumed);
  failed   anything else.
Run it alone: each guest takes both CPUs (TCG).
"""
import json
import os
import sys
import tempfile
import time

import pytest

from conftest import REPO, require_root

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import kernelvm  # noqa: E402
import stapkit  # noqa: E402
from guest_checks import MiB, PAGE  # noqa: E402
from test_kernels import raw_pages  # noqa: E402

NAMES = os.environ.get("PAGETRACE_STAP_KERNELS", "6.1 6.12 7.3").split()
GUEST_TIMEOUT = 900
_results = {}


def guest_results(name):
    """Kernel NAME's compile and guest results, once per session."""
    if name in _results:
        return _results[name]
    require_root()
    k = kernelvm.kernel(name)
    began = time.monotonic()
    ko, why = stapkit.compile_module(k)
    took = round(time.monotonic() - began, 1)
    if ko is None:
        _results[name] = {"refused": why, "compile_seconds": took}
        return _results[name]
    with tempfile.TemporaryDirectory(prefix="pagetrace-stap-") as scratch:
        out = os.path.join(scratch, "stap.json")
        command = ["env", f"PATH={stapkit.BIN}:/usr/sbin:/usr/bin:/sbin:/bin",
                   f"PAGETRACE_STAP_CACHE={stapkit.MODULES}", sys.executable,
                   os.path.join(REPO, "tests", "kernels", "stap_guest.py"),
                   "--tools", os.path.join(REPO, "tracer"), "--out", out]
        result = kernelvm.boot(k, command, scratch, timeout=GUEST_TIMEOUT, memory="2G")
        if not os.path.exists(out):
            pytest.fail(f"kernel {name}: no results (exit {result.returncode}): "
                        f"{result.stderr[-1500:]}")
        with open(out) as f:
            _results[name] = dict(json.load(f), module=ko, compile_seconds=took)
    return _results[name]


def stap_pages(c):
    """The module's notes (what a missing probe leaves out) and the pages
    of the check's file in its "@@pt" lines; raises Refused for a proper
    refusal."""
    run = c["runs"][0]
    lines = run["stderr"].strip().splitlines()
    notes = [x for x in lines if x.startswith("readpage-stap: kernel ") and "no probe on" in x]
    if run["rc"] != 0:
        # A refusal: exit 1, one line beside the notes, no record.
        others = [x for x in lines if x not in notes]
        assert run["rc"] == 1 and len(others) == 1 and others[0].startswith("readpage-stap: ") and (
            "record nothing" in others[0] or "cannot start" in others[0]) and (
            "@@pt " not in run["stdout"]), f"exit {run['rc']}: {run['stderr'][-1500:]}"
        pytest.skip(f"refused: {others[0]}")
    assert len(notes) == len(lines), f"unexpected messages: {lines}"
    return notes, raw_pages(run["stdout"], c["kernel_dev"], c["ino"])


def check(name, which):
    results = guest_results(name)
    if "refused" in results:
        why = results["refused"]
        assert why.startswith("readpage-stap: ") and kernelvm.kernel(name).release() in why
        pytest.skip(f"refused ({results['compile_seconds']} s): {why}")
    c = results["checks"][which]
    assert "error" not in c, c.get("error")
    return c


@pytest.mark.parametrize("name", NAMES)
def test_stap_cold_read(name):
    notes, pages = stap_pages(check(name, "readpage_cold_read"))
    c = _results[name]["checks"]["readpage_cold_read"]
    if any("readahead" in x for x in notes):
        assert pages <= set(c["cached"])
        pytest.skip("refused: " + "; ".join(notes))
    assert pages == set(c["cached"]) == set(range(8 * MiB // PAGE))


@pytest.mark.parametrize("name", NAMES)
def test_stap_mmap_faults(name):
    notes, pages = stap_pages(check(name, "readpage_mmap_faults"))
    c = _results[name]["checks"]["readpage_mmap_faults"]
    assert pages == set(c["cached"])
    assert len(pages) == 64


def signalled(name, which):
    """A signal check's results, once its module could be built."""
    c = check(name, which)
    assert c["ready"], f"the module never loaded or the command never ran: {c}"
    return c


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("which, status", [("stap_sigterm", 143), ("stap_sigint_to_group", 130)])
def test_stap_signal_unloads_and_stops(name, which, status):
    """A signal to the wrapper ends the trace within seconds, not when the
    command would have: exit 128+N, the module unloaded, nothing of its
    session left running."""
    c = signalled(name, which)
    assert (c["rc"], c["modules_after"], c["left_running"]) == (status, [], []), c
    assert c["seconds"] < 30, c


@pytest.mark.parametrize("name", NAMES)
def test_stap_after_sigkill_says_how_to_unload(name):
    """SIGKILL leaves the module loaded (nothing can catch it); the next run
    refuses in one line naming it and the rmmod that removes it, and the
    help's command removes it."""
    c = signalled(name, "stap_sigkill")
    assert len(c["left_loaded"]) == 1, c
    module = c["left_loaded"][0]
    again = c["again"]
    assert again["rc"] == 1 and again["stderr"].count("\n") == 1, again
    assert f"module {module} is already loaded" in again["stderr"]
    assert f"rmmod {module}" in again["stderr"]
    assert (c["unload_rc"], c["modules_after"]) == (0, []), c
