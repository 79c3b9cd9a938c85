"""make install puts every tool and man page under PREFIX, and they run."""
import os
import subprocess

import pytest

from conftest import REPO

pytestmark = pytest.mark.unit   # needs no root (conftest.py)

# Installed C tools carry a pagetrace- prefix: bcc ships a `trace` too.
TOOLS = ["pagetrace", "pagetrace-trace", "pagetrace-replay", "pagetrace-cachestat", "pagetrace-cachetop",
         "pagetrace-readpage", "pagetrace-launch", "pagecache", "startup-bench", "resolve-inodes"]
MAN = ["man1/pagetrace.1", "man8/pagetrace-trace.8", "man8/pagetrace-cachestat.8", "man8/pagetrace-cachetop.8",
       "man1/pagetrace-replay.1", "man1/pagetrace-launch.1", "man1/pagecache.1", "man1/startup-bench.1"]


def test_make_install_into_destdir(tmp_path):
    dest = tmp_path / "root"
    proc = subprocess.run(["make", "-s", "-C", REPO, "install", f"DESTDIR={dest}",
                           "PREFIX=/usr/local"], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    prefix = dest / "usr" / "local"
    for tool in TOOLS:
        path = prefix / "bin" / tool
        assert os.access(path, os.X_OK), path
        help_run = subprocess.run([str(path), "--help"], capture_output=True, text=True,
                                  timeout=60)
        assert help_run.returncode == 0, (tool, help_run.stderr)
        assert "EXAMPLES" in help_run.stdout.upper(), tool
    for page in MAN:
        assert (prefix / "share" / "man" / page).is_file(), page
    assert (prefix / "share" / "pagetrace" / "readpage.bt").is_file()
    # The installed startup-bench finds its statistics module without the checkout.
    runs_csv = os.path.join(REPO, "samples", "startup-runs.csv")
    summary = subprocess.run([str(prefix / "bin" / "startup-bench"), "--summarize", runs_csv],
                             capture_output=True, text=True, timeout=60)
    # Exit 1 means "a run in the CSV failed", which the sample has on purpose.
    has_failed_run = any(",failed," in line or ",timeout," in line for line in open(runs_csv))
    assert summary.returncode == (1 if has_failed_run else 0), summary.stderr
    assert "simulated vs real cold" in summary.stdout
    _installed_launch_hands_sorted_to_the_planner(prefix, tmp_path)


def _installed_launch_hands_sorted_to_the_planner(prefix, tmp_path):
    """The installed C launcher finds the installed planner (share/pagetrace)
    and the planner the installed replayer (beside the launcher): a sorted
    prefetch runs, with no source tree on the way."""
    import json
    import sys
    sys.path.insert(0, os.path.join(REPO, "analysis"))
    from pagetrace.core import packfile
    target = tmp_path / "data"
    target.write_bytes(b"x" * 8192)
    pack = packfile.Pack(1, 4096, int(__import__("time").time()), "test", 1, 0,
                         [packfile.identify(str(target))],
                         [packfile.PackRange(0, 0, 2, 0)])
    packfile.write(pack, str(tmp_path / "t.pack"))
    report = tmp_path / "report.json"
    done = subprocess.run([str(prefix / "bin" / "pagetrace-launch"), "--mode", "sorted",
                           "--report", str(report), str(tmp_path / "t.pack"), "--", "true"],
                          capture_output=True, text=True, timeout=60, cwd="/")
    assert done.returncode == 0, done.stderr
    decided = json.loads(report.read_text())
    assert decided["mode"] == "sorted" and decided["problem"] is None, (decided, done.stderr)


def test_installed_front_door_without_the_analysis_libraries(tmp_path):
    """The installed `pagetrace` runs on the system Python: without pandas
    its tools' verbs, --help and --version work, and an analysis verb says
    what is missing (a stand-in pandas that fails to import, so the test
    does not depend on what this machine's system Python has)."""
    dest = tmp_path / "root"
    subprocess.run(["make", "-s", "-C", REPO, "install", f"DESTDIR={dest}",
                    "PREFIX=/usr/local"], capture_output=True, check=True)
    front = str(dest / "usr" / "local" / "bin" / "pagetrace")
    fake = tmp_path / "fake" / "pandas"
    fake.mkdir(parents=True)
    (fake / "__init__.py").write_text("raise ImportError('no pandas here (test)')\n")
    env = {**os.environ, "PYTHONPATH": str(tmp_path / "fake")}

    def run(*args):
        return subprocess.run(["python3", front, *args], capture_output=True, text=True,
                              env=env, timeout=60)

    assert run("--version").stdout.startswith("pagetrace (pagetrace) ")
    listed = run("--help")
    assert listed.returncode == 0 and "cachetop" in listed.stdout
    assert "no pandas here (test)" in listed.stdout
    cache = run("cache", "--help")
    assert cache.returncode == 0 and "evict" in cache.stdout
    summary = run("summary", os.path.join(REPO, "samples", "basic.log"))
    assert summary.returncode == 1 and summary.stdout == ""
    assert summary.stderr.startswith("pagetrace: summary: needs numpy, pandas and matplotlib")
    assert "Traceback" not in summary.stderr
