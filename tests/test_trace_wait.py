"""trace --container NAME --wait when the runtime's `docker events` ends at
once: the wait goes on by inspecting the container by name, where it used
to read the ended events forever (a pack's run hung 600 s in CI of
2026-11-30 06:09 UTC, its target trace's `docker events` gone). The
runtime is a stand-in on PATH that notes what it is asked."""
import os
import signal
import subprocess
import time

from conftest import REPO, require_root

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
