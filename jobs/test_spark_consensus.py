"""The Spark SQL job against `pagetrace merge` (make test-spark).

Not part of `make test`: it needs pyspark (jobs/requirements.txt) and a
Java 17+ runtime, which `make test-spark` installs. Each test converts the
same runs into one dataset, runs `pagetrace merge` on it and the Spark job
on a local single-node Spark (local[2]), and compares the outputs byte for
byte: the consensus trace (but for its `# command:` line, which names the
program that wrote it) and the stability report.
"""
import os
import random
import subprocess
import sys

import pytest

TOP = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
JOB = os.path.join(TOP, "jobs", "spark_consensus.py")
ENV = {**os.environ, "PYTHONPATH": os.path.join(TOP, "analysis")}
sys.path.insert(0, os.path.join(TOP, "tests"))
from test_scale import _write_run  # noqa: E402 (after the path)


def _runs(tmp_path, n_runs, used=False, seed=11):
    """Runs with a shared core in a run-specific order (so the median
    ranks are non-trivial, with ties and halves), pages of a few runs, own
    pages, escaped and non-UTF-8 names."""
    rng = random.Random(seed)
    core = [(f"/lib/c{i % 7}.so", 4096 * (i // 7)) for i in range(300)]
    core.append(("/data/my\\040file\\377", 0))
    paths = []
    for run in range(n_runs):
        pages = list(core)
        rng.shuffle(pages)
        pages += [(f"/var/r{run}", 4096 * j) for j in range(40)]
        pages += [("/shared/few", 4096 * j)
                  for j in range(5 * run, 5 * run + 30)]
        rng.shuffle(pages)
        accessed = [p for p in pages if rng.random() < 0.7] if used else ()
        paths.append(_write_run(tmp_path / f"run{run:02d}.log", pages,
                                version=2 if used else 1,
                                accessed=accessed))
    return paths


def _pagetrace(*argv):
    # Names that are not UTF-8 come out as their bytes (the CLI writes them
    # with surrogateescape): read them back the same way.
    return subprocess.run([sys.executable, "-m", "pagetrace.cli", *argv],
                          capture_output=True, text=True, errors="surrogateescape", env=ENV)


def _spark(*argv):
    return subprocess.run([sys.executable, JOB, "--master", "local[2]",
                           *argv], capture_output=True, text=True, env=ENV,
                          timeout=600)


def _without_command(path):
    with open(path, "rb") as f:
        lines = f.read().split(b"\n")
    commands = [line for line in lines if line.startswith(b"# command: ")]
    assert len(commands) == 1
    return [line for line in lines if not line.startswith(b"# command: ")]


@pytest.mark.parametrize("options", [["--min-runs", "5"],
                                     ["--min-fraction", "0.25"],
                                     ["--used", "--min-runs", "3"]],
                         ids=["min-runs", "min-fraction", "used"])
def test_spark_job_writes_what_merge_writes(options, tmp_path):
    used = "--used" in options
    traces = _runs(tmp_path, 8, used=used)
    dataset = tmp_path / "ds"
    done = _pagetrace("convert", "-q", "-o", str(dataset), *traces)
    assert done.returncode == 0, done.stderr
    merged = tmp_path / "merge.log"
    stability = tmp_path / "merge.json"
    done = _pagetrace("merge", *options, "-o", str(merged), "--stability",
                      str(stability), str(dataset))
    assert done.returncode == 0, done.stderr
    out = tmp_path / "spark"
    done = _spark(str(dataset), str(out), *options)
    assert done.returncode == 0, done.stderr[-3000:]
    ours = _without_command(merged)
    theirs = _without_command(out / "consensus.log")
    # Something to compare: the core (301 pages) at least.
    assert len(ours) > 300
    assert theirs == ours
    assert (out / "stability.json").read_bytes() == stability.read_bytes()


def test_spark_job_refuses_runs_of_different_page_sizes(tmp_path):
    traces = _runs(tmp_path, 2)
    odd = _write_run(tmp_path / "odd.log", [("/lib/c0.so", 0)],
                     page_size=16384)
    dataset = tmp_path / "ds"
    assert _pagetrace("convert", "-q", "-o", str(dataset), *traces,
                      odd).returncode == 0
    done = _spark(str(dataset), str(tmp_path / "out"), "--min-runs", "2")
    assert done.returncode == 1
    assert f"spark_consensus: {dataset}: runs of different page sizes " \
        "[4096, 16384]" in done.stderr
