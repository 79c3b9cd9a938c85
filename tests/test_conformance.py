"""Every reader of the trace format on the conformance battery
(samples/conformance/, described in samples/README.md and in the
"Readers" section of docs/trace-format.md).

Each case is either refused whole (one line `TOOL: FILE: reason`, exit
status 1) or read, with the same lines flagged `TOOL: FILE:LINE: reason`,
in the same words, by every reader: the Python core, the pandas reader
(both engines), replay/tracefile-dump, replay --plan, pagecache status
--trace, startup-bench --trace and pagetrace summary. Never a traceback,
never a signal. The expectations are written by hand in NAME.expect.json.
"""
import json
import os
import re
import subprocess
import sys
import warnings
from concurrent.futures import ThreadPoolExecutor

import pytest

from conftest import REPO

sys.path.insert(0, os.path.join(REPO, "analysis"))
from pagetrace import tracefile  # noqa: E402

CASES_DIR = os.path.join(REPO, "samples", "conformance")
CASES = sorted(name[:-len(".log")] for name in os.listdir(CASES_DIR)
               if name.endswith(".log"))
VENV_PYTHON = os.path.join(REPO, ".venv", "bin", "python")
PAGETRACE = os.path.join(REPO, ".venv", "bin", "pagetrace")
SYSTEM_PYTHON = "/usr/bin/python3"


def case_path(name):
    return os.path.join(CASES_DIR, name + ".log")


def expectation(name):
    with open(os.path.join(CASES_DIR, name + ".expect.json")) as f:
        return json.load(f)


@pytest.mark.unit
def test_battery_covers_the_required_cases():
    required = {"empty", "binary", "unknown-version", "page-size-3000",
                "crlf", "superscript-offset", "huge-integers",
                "negative-offset", "bad-escapes", "v2-unknown-kind",
                "v2-undeclared-kind", "v2-missing-records",
                "v2-wrong-fourth-column", "no-final-newline", "header-only",
                "all-malformed"}
    assert required <= set(CASES)
    for name in CASES:
        expected = expectation(name)
        assert set(expected) in ({"refused"}, {"records", "flags"}), name


# ---------------------------------------------------------------------------
# In-process readers.

def core_outcome(path):
    try:
        trace = tracefile.read(path)
    except tracefile.TraceError as err:
        assert str(err) == f"{path}: {err.reason}"
        return {"refused": err.reason}
    return {"records": len(trace.records),
            "flags": [list(flag) for flag in trace.malformed]}


@pytest.mark.unit
@pytest.mark.parametrize("name", CASES)
def test_core_reader(name):
    assert core_outcome(case_path(name)) == expectation(name)


@pytest.mark.unit
@pytest.mark.parametrize("engine", ["auto", "python"])
@pytest.mark.parametrize("name", CASES)
def test_pandas_reader(name, engine):
    # The crash at exit that pyarrow can cause is looked for below, in
    # processes of their own.
    import pagetrace
    path = case_path(name)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", pagetrace.TraceWarning)
            frame = pagetrace.read_trace(path, engine=engine)
    except pagetrace.TraceError as err:
        assert str(err) == f"{path}: {err.reason}"
        outcome = {"refused": err.reason}
    else:
        assert set(frame["kind"]) <= {"read", "access", "map"}
        outcome = {"records": len(frame),
                   "flags": [list(f) for f in frame.attrs["malformed"]]}
    assert outcome == expectation(name)


# ---------------------------------------------------------------------------
# The tools, as a user runs them.

def tools():
    """name -> (argv builder, prefix of their messages, pure reader)."""
    return {
        "tracefile-dump": (lambda p: [os.path.join(
            REPO, "replay", ".output", "tracefile-dump"), p],
            "tracefile-dump", True),
        "replay --plan": (lambda p: [os.path.join(REPO, "replay", "replay"),
                                     "--plan", p], "replay", False),
        "pagecache status": (lambda p: [SYSTEM_PYTHON, os.path.join(
            REPO, "scripts", "pagecache"), "status", "--trace", p],
            "pagecache", False),
        "startup-bench": (lambda p: [SYSTEM_PYTHON, os.path.join(
            REPO, "scripts", "startup-bench"), "--trace", p, "--states",
            "hot", "-n", "1", "--", "true"], "startup-bench", False),
        "pagetrace summary": (lambda p: [PAGETRACE, "summary", p],
                              "pagetrace", True),
    }


def run_tool(argv):
    return subprocess.run(argv, capture_output=True, timeout=120,
                          stdin=subprocess.DEVNULL)


def flagged_lines(stderr, prefix, path):
    pattern = re.compile(re.escape(f"{prefix}: {path}:") + r"(\d+): (.*)")
    flags = []
    for line in stderr.splitlines():
        match = pattern.fullmatch(line)
        if match:
            flags.append([int(match.group(1)), match.group(2)])
    return flags


@pytest.mark.parametrize("tool", list(tools()))
@pytest.mark.parametrize("name", CASES)
def test_tool(name, tool):
    build, prefix, pure_reader = tools()[tool]
    path = case_path(name)
    done = run_tool(build(path))
    stderr = done.stderr.decode("utf-8", "backslashreplace")
    assert done.returncode >= 0, f"killed by signal {-done.returncode}"
    assert "Traceback" not in stderr, stderr
    expected = expectation(name)
    if "refused" in expected:
        assert done.returncode == 1, stderr
        assert stderr.splitlines() == [f"{prefix}: {path}: "
                                       f"{expected['refused']}"]
        return
    assert flagged_lines(stderr, prefix, path) == expected["flags"], stderr
    if pure_reader or expected["records"]:
        # Every record of the battery names /etc/passwd or /etc/group,
        # which exist: with records, the job itself succeeds.
        assert done.returncode == 0, stderr


# ---------------------------------------------------------------------------
# The exit of a process that read a trace with pyarrow: it used to abort
# (SIGABRT, "terminate called without an active exception") about one run
# in twenty on an empty file, and now and then on any small trace.

ABORT_PROBE = r"""
import sys, warnings
import pagetrace
for path in sys.argv[1:]:
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            pagetrace.read_trace(path)
    except pagetrace.TraceError:
        pass
"""


def test_no_abort_at_exit_in_a_hundred_runs():
    paths = [case_path("empty"), case_path("header-only"),
             case_path("no-final-newline"), case_path("all-malformed")]
    with ThreadPoolExecutor(max_workers=3) as pool:
        runs = list(pool.map(lambda _: subprocess.run(
            [VENV_PYTHON, "-c", ABORT_PROBE, *paths], capture_output=True,
            timeout=120), range(100)))
    failed = [(r.returncode, r.stderr[-200:]) for r in runs
              if r.returncode != 0]
    assert failed == []


def test_pagetrace_summary_refuses_an_empty_file_every_time():
    path = case_path("empty")
    with ThreadPoolExecutor(max_workers=3) as pool:
        runs = list(pool.map(lambda _: run_tool([PAGETRACE, "summary", path]),
                             range(10)))
    assert {(r.returncode, r.stderr) for r in runs} == {
        (1, f"pagetrace: {path}: empty file\n".encode())}


def test_import_pagetrace_needs_no_pandas():
    # With the system Python, which has neither numpy nor pandas, and with
    # the venv's, where they are installed but must not be imported.
    probe = ("import sys; sys.path.insert(0, sys.argv[1]); import pagetrace, "
             "pagetrace.tracefile, pagetrace.escape, pagetrace.stats; "
             "assert not {'pandas', 'numpy', 'pyarrow'} & set(sys.modules)")
    for python in (SYSTEM_PYTHON, VENV_PYTHON):
        done = subprocess.run([python, "-c", probe,
                               os.path.join(REPO, "analysis")],
                              capture_output=True, text=True)
        assert done.returncode == 0, (python, done.stderr)


@pytest.mark.unit
def test_warnings_name_file_and_line():
    trace = tracefile.read(case_path("all-malformed"))
    assert trace.warnings()[0] == (f"{case_path('all-malformed')}:4: "
                                   "timestamp is not an unsigned integer")
    assert len(trace.warnings()) == 4 and trace.trailer is None
