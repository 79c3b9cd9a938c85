"""The analysis package against the real `replay` on the sample start-up
workload: same requests, same seeks, same on-disk order. `make test` builds
the tools first; without them these tests fail rather than skip."""
import json
import os
import subprocess

import pytest

from pagetrace import metrics, read_trace
from pagetrace.formats import read_plan

pytestmark = pytest.mark.unit   # needs no root (conftest.py)

TOP = os.path.join(os.path.dirname(__file__), "..")
REPLAY = os.path.join(TOP, "replay", "replay")
STARTUP_APP = os.path.join(TOP, "samples", ".output", "startup-app")



@pytest.fixture(autouse=True, scope="module")
def tools_built():
    for tool in (REPLAY, STARTUP_APP):
        assert os.access(tool, os.X_OK), f"{tool} is not built: run make"


@pytest.fixture(scope="module")
def workload(tmp_path_factory):
    directory = tmp_path_factory.mktemp("crosscheck")
    app = directory / "app"
    subprocess.run([STARTUP_APP, "--setup", str(app)], check=True,
                   capture_output=True)
    listing = subprocess.run([STARTUP_APP, "--list-pages", str(app)],
                             check=True, capture_output=True, text=True)
    trace = directory / "trace.log"
    trace.write_text("".join(line + "\n" for line in
                             listing.stdout.splitlines()
                             if not line.startswith("startup-app")))

    def replay(*args):
        return subprocess.run([REPLAY, *args, str(trace)], check=True,
                              capture_output=True, text=True).stdout

    plans = {}
    for name, args in (("original", ()), ("sorted", ("--sorted",))):
        path = directory / f"plan-{name}.csv"
        path.write_text(replay("--plan", *args))
        plans[name] = read_plan(path)
    run = json.loads(replay("--json", "--buffered"))
    return trace, plans, run


def test_requests_match_replay(workload):
    trace, plans, run = workload
    requests = metrics.group_requests(read_trace(trace))
    assert len(requests) == run["requests"] == len(plans["original"])
    assert requests["offset"].tolist() == plans["original"]["offset"].tolist()


def test_physical_seeks_match_replay(workload):
    _, plans, run = workload
    # The workload lives on the test machine's ext4, which has FIEMAP.
    assert not plans["original"]["physical_offset"].isna().all(), "no FIEMAP offsets"
    report = metrics.plan_seek_report(plans["original"])["original"]
    assert report["seeks"] == run["seeks"]
    assert report["seek_distance_bytes"] == run["seek_distance_bytes"]


def test_on_disk_order_matches_replay_sorted(workload):
    _, plans, _ = workload
    mine = metrics.sort_plan_physically(plans["original"])
    theirs = plans["sorted"]
    assert list(zip(mine["path"].astype(str), mine["offset"],
                    mine["length"])) == \
        list(zip(theirs["path"].astype(str), theirs["offset"],
                 theirs["length"]))
