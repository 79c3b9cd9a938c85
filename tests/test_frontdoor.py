"""`pagetrace VERB`: the front door lists every verb on one line, runs the
C tools and the core's tools, and every verb answers --version."""
import os
import re
import subprocess

import pytest

from conftest import REPO
from pagetrace.cli import VERBS
from pagetrace.core.c_tools import C_TOOLS
from pagetrace.frontdoor import PYTHON_TOOLS

PAGETRACE = os.path.join(REPO, ".venv", "bin", "pagetrace")
SAMPLES = os.path.join(REPO, "samples")
# The verbs, from the tables the front door and the analysis layer dispatch
# on: a verb added there is checked here without a list to keep.
FRONT_VERBS = [*C_TOOLS, *PYTHON_TOOLS]
C_VERBS = {verb: path for verb, (path, *_) in C_TOOLS.items()}
ANALYSIS_VERBS = list(VERBS)


def run(*args, timeout=120):
    return subprocess.run([PAGETRACE, *args], capture_output=True, text=True,
                          timeout=timeout, stdin=subprocess.DEVNULL)


def test_help_lists_every_verb_on_one_line():
    done = run("--help")
    assert done.returncode == 0
    listed = {}
    for line in done.stdout.splitlines():
        match = re.fullmatch(r"    (\S+) +(\S.*)", line)
        if match:
            listed[match.group(1)] = match.group(2)
    for verb in FRONT_VERBS + ANALYSIS_VERBS:
        assert verb in listed, (verb, done.stdout)
    assert set(listed) == set(FRONT_VERBS + ANALYSIS_VERBS), done.stdout


@pytest.mark.unit
def test_the_verb_tables_are_the_whole_list():
    """Not vacuous: the tables hold the verbs docs/architecture.md names,
    the C tools among them."""
    assert {"launch", "pack", "compare", "convert", "waste"} <= set(FRONT_VERBS + ANALYSIS_VERBS)
    assert {"trace", "replay", "cachestat", "cachetop", "launch"} <= set(C_VERBS)


def test_every_verb_has_version():
    for verb in FRONT_VERBS + ANALYSIS_VERBS:
        if verb in C_VERBS:
            continue  # the C tools' own -V, checked below
        done = run(verb, "--version")
        assert done.returncode == 0, (verb, done.stderr)
        assert re.fullmatch(r"pagetrace( \S+)? \(pagetrace\) \d+\.\d+\.\d+\n",
                            done.stdout), (verb, done.stdout)
    assert run("-V").stdout.startswith("pagetrace (pagetrace) ")


def test_c_tools_run_from_the_tree():
    # The same output as the tool run directly (help text, exit status).
    for verb, path in C_VERBS.items():
        direct = subprocess.run([os.path.join(REPO, path), "--help"],
                                capture_output=True, text=True, timeout=60)
        via = run(verb, "--help")
        assert via.returncode == direct.returncode == 0, via.stderr
        assert via.stdout.splitlines()[1:] == direct.stdout.splitlines()[1:]
        version = run(verb, "--version")
        assert version.returncode == 0, verb
        assert re.search(r"\b\d+\.\d+\.\d+\b", version.stdout), verb


def test_cache_verb_is_pagecache(tmp_path):
    path = tmp_path / "f"
    path.write_bytes(b"x" * 10000)
    done = run("cache", "status", "--json", str(path))
    assert done.returncode == 0, done.stderr
    assert '"pages": 3' in done.stdout
    # Errors are named after the verb, once.
    done = run("cache", "status", "--trace", os.path.join(
        SAMPLES, "conformance", "empty.log"))
    assert done.returncode == 1
    assert done.stderr == (f"pagetrace cache: {SAMPLES}/conformance/"
                           "empty.log: empty file\n")


def test_startup_is_the_bench_and_startup_csv_still_the_table(tmp_path):
    runs_csv = os.path.join(SAMPLES, "startup-runs.csv")
    bench = run("startup", "--summarize", runs_csv)
    # A failed and a timed-out run in the sample: exit status 1.
    assert bench.returncode == 1, bench.stderr
    assert "simulated vs real cold" in bench.stdout
    table = run("startup", runs_csv, "-o", str(tmp_path / "chart"))
    assert table.returncode == 0, table.stderr
    assert table.stdout.splitlines()[0].split()[:3] == ["state", "runs",
                                                        "failed"]
    assert (tmp_path / "chart.png").is_file()
    same = run("startup-table", runs_csv, "-o", str(tmp_path / "chart2"))
    assert same.stdout.splitlines()[:6] == table.stdout.splitlines()[:6]
