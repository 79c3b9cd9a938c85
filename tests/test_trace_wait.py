"""trace --container NAME --wait when the runtime's `docker events` ends at
once: the wait goes on by inspecting the container by name, where it used
to read the ended events forever (a pack's run hung 600 s in CI of
2026-11-30 06:09 UTC, its target trace's `docker events` gone); and once
the container is found, trace says so on stderr (pack waits for that
line). The runtime is a stand-in on PATH that notes what it is asked."""
import os
import signal
import subprocess
import threading
import time

import pytest

from conftest import REPO, require_root, wait_ready
from test_cgroup import cgroup_dir  # noqa: F401 (fixture)

TRACE = os.path.join(REPO, "tracer", "trace")


def test_the_wait_inspects_once_the_events_end(tmp_path):
    require_root()
    asked = tmp_path / "asked"
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    docker = bin_dir / "docker"
    docker.write_text(f'#!/bin/sh\necho "$1" >> {asked}\n'
                      'case "$1" in version|events) exit 0 ;; esac\n'
                      'echo "Error: No such object: pt-none" >&2; exit 1\n')
    docker.chmod(0o755)
    env = dict(os.environ, PATH=f"{bin_dir}:{os.environ['PATH']}")
    tracer = subprocess.Popen([TRACE, "-x", "-q", "--container", "pt-none", "--wait",
                               "-o", str(tmp_path / "t.log")], env=env,
                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 30
        after = []
        while time.monotonic() < deadline and len(after) < 3:
            time.sleep(0.2)
            lines = asked.read_text().split() if asked.exists() else []
            after = lines[lines.index("events") + 1:] if "events" in lines else []
        assert len(after) >= 3 and set(after) == {"inspect"}, (
            f"asked after the events ended: {after}; trace: {tracer.poll()}")
    finally:
        tracer.send_signal(signal.SIGINT)
        _, err = tracer.communicate(timeout=30)
    assert tracer.returncode >= 0, err


@pytest.mark.parametrize("cgroup_dir", ["v2"], indirect=True)
def test_the_container_found_is_said(tmp_path, cgroup_dir):  # noqa: F811 (fixture)
    """A container the stand-in runtime says runs, its process in a cgroup
    made here: once trace traces that cgroup it says "trace: Tracing
    container NAME." on stderr, after its readiness line."""
    sleeper = subprocess.Popen(["sleep", "60"])
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    docker = bin_dir / "docker"
    docker.write_text('#!/bin/sh\ncase "$1" in version|events) exit 0 ;; esac\n'
                      f'printf "%064x\\n{sleeper.pid}\\n\\n" 1\n')
    docker.chmod(0o755)
    env = dict(os.environ, PATH=f"{bin_dir}:{os.environ['PATH']}")
    tracer = None
    try:
        with open(os.path.join(cgroup_dir, "cgroup.procs"), "w") as f:
            f.write(str(sleeper.pid))
        tracer = subprocess.Popen([TRACE, "-x", "-q", "--container", "pt-said", "--wait",
                                   "-o", str(tmp_path / "t.log")], env=env,
                                  stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        assert wait_ready(tracer, "trace") == []
        # Read by a thread: the line may be in the buffer wait_ready() filled.
        said = []
        reader = threading.Thread(target=lambda: said.append(tracer.stderr.readline()),
                                  daemon=True)
        reader.start()
        reader.join(30)
        assert said == ["trace: Tracing container pt-said.\n"], "not said within 30 s"
    finally:
        if tracer:
            tracer.send_signal(signal.SIGINT)
            _, err = tracer.communicate(timeout=30)
        sleeper.kill()
        sleeper.wait()
    assert tracer.returncode == 0, err
