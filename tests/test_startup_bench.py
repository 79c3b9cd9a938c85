"""scripts/startup-bench with the built-in workload samples/.output/startup-app.

As root, under /var/tmp (a block-device filesystem), cleaned up afterwards.
The prefetched and simulated states run once with a fake replay script that
logs how it was called, and once with the real replay/replay.
"""
import csv
import json
import os
import shutil
import subprocess
import tempfile
import time

import pytest

from conftest import REPO, require_root

BENCH = os.path.join(REPO, "scripts", "startup-bench")
STARTUP_APP = os.path.join(REPO, "samples", ".output", "startup-app")
REAL_REPLAY = os.path.join(REPO, "replay", "replay")
PAGECACHE = os.path.join(REPO, "scripts", "pagecache")
NOBODY = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"]
CSV_HEADER = ["run", "state", "iteration", "status", "elapsed_s", "prefetch_s",
              "total_s", "cold_fraction"]
ALL_STATES = ["cold", "selective", "hot", "prefetched", "simulated"]

FAKE_REPLAY = """#!/bin/sh
# Stands in for replay/replay: logs its arguments; "prefetches" by reading
# the traced files, and "replays" with O_DIRECT by doing nothing for 10 ms.
echo "$*" >> "{log}"
for trace; do :; done
case "$1" in
--sorted) grep -v '^#' "$trace" | awk '{{print $2}}' | sort -u | xargs cat > /dev/null ;;
*) sleep 0.01 ;;
esac
"""


class Workload:
    """startup-app's files, its own trace of them, and a scratch directory."""

    def __init__(self):
        require_root()
        subprocess.run(["make", "-s", "-C", os.path.join(REPO, "samples")], check=True)
        self.root = tempfile.mkdtemp(prefix="startup-bench-test-", dir="/var/tmp")
        os.chmod(self.root, 0o755)  # the non-root tests read it as nobody
        assert os.major(os.stat(self.root).st_dev) != 0, "not on a block device"
        self.data = os.path.join(self.root, "app")
        subprocess.run([STARTUP_APP, "--setup", self.data], check=True,
                       stdout=subprocess.DEVNULL)
        self.trace = os.path.join(self.root, "intended.log")
        with open(self.trace, "w") as f:
            subprocess.run([STARTUP_APP, "--list-pages", self.data], check=True, stdout=f)
        self.replay_log = os.path.join(self.root, "replay-calls.log")
        self.fake_replay = os.path.join(self.root, "fake-replay")
        with open(self.fake_replay, "w") as f:
            f.write(FAKE_REPLAY.format(log=self.replay_log))
        os.chmod(self.fake_replay, 0o755)
        self.command = [STARTUP_APP, self.data]

    def scratch(self, name):
        """A world-writable directory for one test."""
        path = os.path.join(self.root, name)
        os.mkdir(path)
        os.chmod(path, 0o777)
        return path


@pytest.fixture(scope="module")
def workload():
    w = Workload()
    yield w
    shutil.rmtree(w.root, ignore_errors=True)


def bench(*args, command, prefix=(), env=None, timeout=120):
    return subprocess.run([*prefix, BENCH, *args, "--", *command],
                          capture_output=True, text=True, timeout=timeout,
                          env=env)


def read_csv(path):
    with open(path, newline="") as f:
        rows = list(csv.reader(f))
    assert rows[0] == CSV_HEADER
    return [dict(zip(CSV_HEADER, row)) for row in rows[1:]]


def check_run_arithmetic(row):
    elapsed = float(row["elapsed_s"])
    prefetch = float(row["prefetch_s"]) if row["prefetch_s"] else 0.0
    assert float(row["total_s"]) == pytest.approx(elapsed + prefetch, abs=2e-6)


# ---------------------------------------------------------------------------
# All five states

def test_all_five_states_interleaved_and_every_run_in_the_csv(workload):
    out = os.path.join(workload.scratch("five"), "runs.csv")
    done = bench("--trace", workload.trace, "-n", "3", "--csv", out, "--json",
                 "--replay", workload.fake_replay, command=workload.command)

    assert done.returncode == 0, done.stderr
    rows = read_csv(out)
    assert len(rows) == 15
    assert [r["state"] for r in rows] == ALL_STATES * 3
    assert [r["run"] for r in rows] == [str(i) for i in range(15)]
    assert [r["iteration"] for r in rows] == [str(i // 5) for i in range(15)]
    assert {r["status"] for r in rows} == {"ok"}
    for row in rows:
        check_run_arithmetic(row)
        has_replay = row["state"] in ("prefetched", "simulated")
        assert (row["prefetch_s"] != "") == has_replay
        evicting = row["state"] in ("selective", "prefetched", "simulated")
        assert (row["cold_fraction"] != "") == evicting
        if evicting:
            # The workload's files are mapped by nobody: eviction is complete.
            assert float(row["cold_fraction"]) == 1.0
    with open(workload.replay_log) as f:
        calls = f.read().splitlines()
    assert calls.count(f"--sorted --prefetch {workload.trace}") == 3
    assert calls.count(workload.trace) == 3

    report = json.loads(done.stdout)
    assert set(report["summary"]) == set(ALL_STATES)
    assert all(s["ok"] == 3 and s["runs"] == 3 for s in report["summary"].values())
    assert len(report["runs"]) == 15
    assert report["refused"] == {}
    assert report["comparisons"]["simulated_vs_selective_percent"] is not None
    assert "[15/15] simulated #2: ok" in done.stderr


def test_real_replay_in_prefetched_and_simulated_states(workload):
    if not os.access(REAL_REPLAY, os.X_OK):
        build = subprocess.run(["make", "-s", "-C", os.path.join(REPO, "replay")],
                               capture_output=True, text=True)
        if build.returncode != 0 or not os.access(REAL_REPLAY, os.X_OK):
            pytest.skip(f"replay/replay could not be built: {build.stderr[-300:]}")
    out = os.path.join(workload.scratch("real-replay"), "runs.csv")
    done = bench("--trace", workload.trace, "-n", "2", "--csv", out,
                 "--states", "selective,prefetched,simulated",
                 "--replay", REAL_REPLAY, command=workload.command)

    assert done.returncode == 0, done.stderr
    rows = read_csv(out)
    assert [r["state"] for r in rows] == ["selective", "prefetched", "simulated"] * 2
    assert {r["status"] for r in rows} == {"ok"}
    for row in rows[1:3] + rows[4:6]:
        assert float(row["prefetch_s"]) > 0
        check_run_arithmetic(row)
    # What the two states rely on: --prefetch fills exactly the traced pages,
    # the O_DIRECT replay leaves them cold.
    for options, expected_cached in ((["--sorted", "--prefetch"], "all"), ([], 0)):
        subprocess.run([PAGECACHE, "evict", "-r", workload.data], check=True,
                       capture_output=True)
        subprocess.run([REAL_REPLAY, *options, workload.trace], check=True,
                       capture_output=True)
        total = json.loads(subprocess.run(
            [PAGECACHE, "status", "--json", "--trace", workload.trace],
            check=True, capture_output=True, text=True).stdout)["total"]
        assert total["traced_pages"] > 300
        wanted = total["traced_pages"] if expected_cached == "all" else 0
        # Pages the kernel reclaimed again since (DAMON pageout on this VM)
        # still count as read: `evict` cleared every shadow entry, so each
        # one cachestat counts as evicted now was brought in by the replay.
        assert total["traced_cached"] + total["evicted"] == wanted, options


# ---------------------------------------------------------------------------
# Refused states

def test_cold_refused_when_not_root(workload):
    out = os.path.join(workload.scratch("nobody"), "runs.csv")
    done = bench("--trace", workload.trace, "-n", "2", "--csv", out,
                 "--states", "cold,hot", command=workload.command,
                 prefix=NOBODY, timeout=60)

    assert done.returncode == 1
    assert "state cold refused: dropping the whole page cache" in done.stderr
    assert "needs root" in done.stderr
    rows = read_csv(out)
    assert [(r["state"], r["status"]) for r in rows] == [("hot", "ok")] * 2


def test_missing_replay_refuses_its_states_loudly(workload):
    out = os.path.join(workload.scratch("no-replay"), "runs.csv")
    missing = os.path.join(workload.root, "no-such-replay")
    done = bench("--trace", workload.trace, "-n", "1", "--csv", out, "--replay", missing,
                 "--states", "hot,prefetched,simulated", command=workload.command)

    assert done.returncode == 1
    for state in ("prefetched", "simulated"):
        assert f"state {state} refused: needs the replayer" in done.stderr
    assert f"{missing} is not an executable file" in done.stderr
    assert [r["state"] for r in read_csv(out)] == ["hot"]


# ---------------------------------------------------------------------------
# Run control: timeouts, readiness markers, failures, the invoking user

def test_timeout_kills_the_whole_process_group(workload):
    scratch = workload.scratch("timeout")
    out, pidfile = os.path.join(scratch, "runs.csv"), os.path.join(scratch, "pid")
    # The shell leaves a grandchild behind; the timeout must kill it too.
    script = f"sleep 300 & echo $! > {pidfile}; wait"
    started = time.monotonic()
    done = bench("--trace", workload.trace, "-n", "1", "--states", "hot",
                 "--timeout", "1", "--csv", out, command=["sh", "-c", script])

    assert time.monotonic() - started < 30
    assert done.returncode == 1
    row = read_csv(out)[0]
    assert row["status"] == "timeout"
    assert 1.0 <= float(row["elapsed_s"]) < 5.0
    with open(pidfile) as f:
        grandchild = int(f.read())
    assert not os.path.exists(f"/proc/{grandchild}"), "grandchild survived"


def test_ready_regex_ends_the_run_at_the_marker(workload):
    out = os.path.join(workload.scratch("regex"), "runs.csv")
    done = bench("--trace", workload.trace, "-n", "1", "--states", "selective",
                 "--ready-regex", r"^startup-app: ready: 40 files", "--csv", out,
                 command=workload.command + ["--hold", "60"])

    assert done.returncode == 0, done.stderr
    row = read_csv(out)[0]
    assert row["status"] == "ok"
    assert float(row["elapsed_s"]) < 5.0, "timed to the marker, not the exit"


def test_ready_file_ends_the_run_when_it_appears(workload):
    scratch = workload.scratch("ready-file")
    out, marker = os.path.join(scratch, "runs.csv"), os.path.join(scratch, "ready")
    open(marker, "w").close()  # a stale marker must be removed before the run
    done = bench("--trace", workload.trace, "-n", "1", "--states", "hot",
                 "--ready-file", marker, "--csv", out,
                 command=["sh", "-c", f"sleep 0.3; touch {marker}; sleep 60"])

    assert done.returncode == 0, done.stderr
    assert 0.3 <= float(read_csv(out)[0]["elapsed_s"]) < 5.0


def test_exit_before_the_marker_and_nonzero_exit_are_failures(workload):
    out = os.path.join(workload.scratch("failures"), "runs.csv")
    done = bench("--trace", workload.trace, "-n", "1", "--states", "hot",
                 "--ready-regex", "never printed", "--csv", out, command=workload.command)
    assert done.returncode == 1
    assert read_csv(out)[0]["status"] == "failed"
    assert "exited with status 0 before the readiness marker" in done.stderr

    done = bench("--trace", workload.trace, "-n", "1", "--states", "hot",
                 "--csv", out, command=["sh", "-c", "echo broken; exit 3"])
    assert done.returncode == 1
    assert read_csv(out)[0]["status"] == "failed"
    assert "exited with status 3; last output: broken" in done.stderr

    missing = os.path.join(workload.root, "no-such-command")
    done = bench("--trace", workload.trace, "-n", "1", "--states", "hot",
                 "--csv", out, command=[missing])
    assert done.returncode == 1
    assert read_csv(out)[0]["status"] == "failed"
    assert f"cannot run {missing}: No such file or directory" in done.stderr


def test_command_runs_as_the_sudo_user(workload):
    scratch = workload.scratch("sudo-user")
    env = dict(os.environ, SUDO_UID="65534", SUDO_GID="65534")
    done = bench("--trace", workload.trace, "-n", "1", "--states", "hot", env=env,
                 command=["sh", "-c", f"id -u > {scratch}/uid; id -g > {scratch}/gid"])

    assert done.returncode == 0, done.stderr
    with open(f"{scratch}/uid") as f, open(f"{scratch}/gid") as g:
        assert (f.read().strip(), g.read().strip()) == ("65534", "65534")
    assert "command runs as nobody (uid 65534, from SUDO_UID)" in done.stderr


# ---------------------------------------------------------------------------
# Statistics against known numbers (t quantile for 4 df: 2.776445)

KNOWN_RUNS = """run,state,iteration,status,elapsed_s,prefetch_s,total_s,cold_fraction
0,cold,0,ok,1.0,,1.0,
1,selective,0,ok,1.0,,1.0,1.0
2,hot,0,ok,0.5,,0.5,
3,prefetched,0,ok,1.9,0.5,2.4,0.9
4,simulated,0,ok,1.0,2.3,3.3,1.0
5,cold,1,ok,2.0,,2.0,
6,selective,1,ok,2.0,,2.0,1.0
7,hot,1,ok,0.5,,0.5,
8,prefetched,1,ok,1.9,0.5,2.4,0.9
9,simulated,1,ok,1.0,2.3,3.3,1.0
10,cold,2,ok,3.0,,3.0,
11,selective,2,ok,3.0,,3.0,0.5
12,selective,2,failed,100.0,,100.0,1.0
13,cold,3,ok,10.0,,10.0,
14,selective,3,ok,4.0,,4.0,1.0
15,selective,4,ok,5.0,,5.0,1.0
16,hot,2,timeout,60.0,,60.0,
"""


def test_summary_statistics_against_known_numbers(tmp_path):
    runs = tmp_path / "known.csv"
    runs.write_text(KNOWN_RUNS)
    done = subprocess.run([BENCH, "--summarize", str(runs), "--json"],
                          capture_output=True, text=True, timeout=30)
    assert done.returncode == 1, "a failed and a timed-out run: exit status 1"
    report = json.loads(done.stdout)
    selective = report["summary"]["selective"]
    assert (selective["runs"], selective["ok"], selective["failed"]) == (6, 5, 1)
    assert selective["mean_s"] == pytest.approx(3.0)
    assert selective["median_s"] == pytest.approx(3.0)
    half = 2.776445 * (2.5 / 5) ** 0.5  # t(0.975, 4) * s / sqrt(n)
    assert selective["ci95_low_s"] == pytest.approx(3.0 - half, abs=1e-5)
    assert selective["ci95_high_s"] == pytest.approx(3.0 + half, abs=1e-5)
    assert selective["ci95_half_percent"] == pytest.approx(100 * half / 3.0, abs=1e-3)
    assert selective["cold_fraction_mean"] == pytest.approx(5.5 / 6)
    cold = report["summary"]["cold"]
    assert (cold["mean_s"], cold["median_s"]) == (pytest.approx(4.0), pytest.approx(2.5))
    hot = report["summary"]["hot"]
    assert (hot["ok"], hot["timeout"], hot["mean_s"]) == (2, 1, pytest.approx(0.5))
    assert hot["ci95_low_s"] == pytest.approx(0.5) == hot["ci95_high_s"]
    prefetched = report["summary"]["prefetched"]
    assert prefetched["prefetch_mean_s"] == pytest.approx(0.5)
    assert prefetched["elapsed_mean_s"] == pytest.approx(1.9)
    compared = report["comparisons"]
    assert compared["simulated_vs_selective_percent"] == pytest.approx(10.0)
    assert compared["simulated_vs_cold_percent"] == pytest.approx(-17.5)
    assert compared["prefetched_vs_selective_percent"] == pytest.approx(-20.0)
    assert compared["selective_minus_hot_s"] == pytest.approx(2.5)

    text = subprocess.run([BENCH, "--summarize", str(runs)], capture_output=True,
                          text=True, timeout=30).stdout
    assert "simulated vs real cold (selective): +10.0%" in text
    rows = {line.split()[0]: line.split() for line in text.splitlines()}
    assert rows["selective"][:6] == ["selective", "5/6", "3.000", "3.000",
                                     "1.037-4.963", "65.4"]


# ---------------------------------------------------------------------------
# Bad input

def test_bad_usage_is_refused_with_a_reason(workload, tmp_path):
    trace = ["--trace", workload.trace]
    cases = [
        ([BENCH, *trace, "-n", "1"], "the command to time"),
        ([BENCH, *trace, "--states", "cold,tepid", "--", "true"], "unknown state(s) tepid"),
        ([BENCH, "--trace", str(tmp_path / "none.log"), "--", "true"],
         "No such file or directory"),
        ([BENCH, "--trace", os.path.join(REPO, "samples", "unknown-version.log"),
          "--", "true"], "unsupported trace format version '3'"),
        ([BENCH, "--trace", os.path.join(REPO, "samples", "basic.log"), "--", "true"],
         "names no file that exists here"),
        ([BENCH, "--summarize", os.path.join(REPO, "samples", "basic.log")],
         "not a startup-bench runs CSV"),
    ]
    # Bad usage and unreadable inputs: 2; a trace that is refused, or that
    # names no file here, makes the job fail: 1 (docs/trace-format.md).
    statuses = [2, 2, 1, 1, 1, 2]
    for (argv, message), status in zip(cases, statuses):
        done = subprocess.run(argv, capture_output=True, text=True, timeout=30)
        assert done.returncode == status, (argv, done.stderr)
        assert message in done.stderr, (argv, done.stderr)
        assert "Traceback" not in done.stderr
        assert "startup-bench: startup-bench:" not in done.stderr


def test_help_has_usage_and_examples():
    done = subprocess.run([BENCH, "--help"], capture_output=True, text=True)
    assert done.returncode == 0
    assert "usage: startup-bench --trace TRACE" in done.stdout
    assert "examples:" in done.stdout


def test_startup_app_is_deterministic(workload):
    first, second = (subprocess.run(workload.command, capture_output=True, text=True,
                                    check=True).stdout for _ in range(2))
    assert first == second
    assert first.startswith("startup-app: ready: 40 files, ")
    listed = [line for line in open(workload.trace) if not line.startswith("#")]
    files = {line.split()[1] for line in listed}
    assert len(files) == 40 and len(listed) > 300
