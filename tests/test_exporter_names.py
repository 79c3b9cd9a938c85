"""cachestat --openmetrics names a container's cgroup without waiting for
its runtime: the name is asked by a thread of its own, the scrape never
waits for `docker inspect`, and a runtime that hangs is killed after
CONTAINER_ASK_S (lib/container.h).

The runtime here is a stand-in on PATH (a `docker` script that answers a
name, or hangs; a `podman` that knows nothing), and the container's cgroup
one made by the test with a container-like name, docker-ID.scope, so that
what the exporter asks and what it shows are exact. Ground truth for the
counts is the kernel's (mincore, cachestat(2)).
"""
import contextlib
import os
import subprocess
import time
import urllib.request

import pytest

from conftest import require_root
from pagecache_util import PAGE, cached_since_eviction
from test_cgroup import (CACHESTAT, KiB, _counts, _free_loopback_port, _leave, _mounts,
                         _own_cgroup, _per_cgroup, _scrape, attached, files, finish, go,
                         reader, stopped)
from test_trace_used import big_ra_ext4, data_dir  # noqa: F401 (fixtures)

CONTAINER_ASK_S = 10        # lib/container.h
ID = "5e" * 32


@pytest.fixture
def container_cgroup():
    """(parent, child): a cgroup2 cgroup below the test's own, and below it
    one named as docker's systemd driver names a container's."""
    require_root()
    mounts = _mounts()
    if "v2" not in mounts:
        pytest.skip("this machine mounts no cgroup2 hierarchy")
    parent = os.path.join(mounts["v2"] + _own_cgroup("v2"), f"pagetrace-names-{os.getpid()}")
    child = os.path.join(parent, f"docker-{ID}.scope")
    made = []
    try:
        for path in (parent, child):
            os.mkdir(path)
            made.append(path)
        yield parent, child
    finally:
        for path in reversed(made):
            if os.path.isdir(path):
                _leave(path)


def runtime(tmp_path, docker_body):
    """A PATH whose `docker` runs @docker_body (sh) after noting its pid and
    arguments in tmp_path/asked, and whose `podman` knows no container."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "docker").write_text(f'#!/bin/sh\necho "$$ $*" >> {tmp_path}/asked\n'
                                    f"{docker_body}\n")
    (bin_dir / "podman").write_text("#!/bin/sh\necho 'Error: no such container' >&2\nexit 125\n")
    for tool in ("docker", "podman"):
        os.chmod(bin_dir / tool, 0o755)
    return f"{bin_dir}:/usr/sbin:/usr/bin:/sbin:/bin"


@contextlib.contextmanager
def exporter_and_reader(parent, child, path, tmp_path, docker_body):
    """The exporter on --cgroup @parent with the stand-in runtime
    @docker_body, attached, and a reader of @path in @child that has read
    it; yields (exporter, port); both ended on every path."""
    port = _free_loopback_port()
    tool = exporter(parent, port, runtime(tmp_path, docker_body))
    proc = reader(child, [], [path])
    try:
        attached(tool)
        go(proc)
        yield tool, port
    finally:
        finish(proc)
        stopped(tool)


def timed_scrape(port):
    start = time.monotonic()
    samples, _ = _scrape(port)
    return samples, time.monotonic() - start


def exporter(parent, port, path):
    return subprocess.Popen([CACHESTAT, "--cgroup", parent, "--openmetrics", f":{port}",
                             "-j", "60", "1"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, env=dict(os.environ, PATH=path))


def pipes(pid):
    """How many pipes process @pid holds open."""
    fd_dir = f"/proc/{pid}/fd"
    links = []
    for fd in os.listdir(fd_dir):
        with contextlib.suppress(FileNotFoundError):
            links.append(os.readlink(os.path.join(fd_dir, fd)))
    return sum(link.startswith("pipe:") for link in links)


def rows_within(port, seconds, cid):
    """Scrapes every 0.2 s for @seconds, until cgroup @cid has its row:
    (its row or None, the last scrape's samples, the slowest scrape)."""
    deadline, slowest = time.monotonic() + seconds, 0.0
    while True:
        samples, took = timed_scrape(port)
        slowest = max(slowest, took)
        row = _per_cgroup(samples).get(cid)
        if row or time.monotonic() > deadline:
            return row, samples, slowest
        time.sleep(0.2)


def test_a_container_cgroup_is_shown_with_its_runtimes_name(data_dir, container_cgroup,  # noqa: F811
                                                            tmp_path):
    """A reader in the container-like cgroup reads 256 KiB cold: its row
    comes with container="web-1" (the runtime's answer, its leading slash
    dropped), its path, and the kernel's counts; the runtime was asked once,
    about the id in the cgroup's name."""
    parent, child = container_cgroup
    (path,) = files(data_dir, [256 * KiB])
    with exporter_and_reader(parent, child, path, tmp_path, "echo /web-1") as (_, port):
        row, _, _ = rows_within(port, 5, os.stat(child).st_ino)
    misses = len(cached_since_eviction(path))
    assert misses == 256 * KiB // PAGE
    assert row is not None, "the container's row did not come within 5 s"
    assert row["container"] == "web-1"
    assert row["cgroup"] == child[len(_mounts()["v2"]):]
    assert (row["misses"], row["hits"]) == (misses, 0)
    asked = (tmp_path / "asked").read_text().splitlines()
    assert [line.split(" ", 1)[1] for line in asked] == [f"inspect --format {{{{.Name}}}} {ID}"]


def test_a_runtime_that_hangs_blocks_no_scrape_and_is_killed(data_dir, container_cgroup,  # noqa: F811
                                                            tmp_path):
    """The runtime hangs: every scrape is still answered within 1 s (one
    that waited for it would take CONTAINER_ASK_S), the totals count the
    reader's pages while its row waits for a name; after CONTAINER_ASK_S
    the runtime is killed and the row comes without a container label. A
    second container met then is shown at once, unnamed: a runtime that
    timed out is not asked again for a minute. Asking holds one pipe
    (the runtime's stdout; its stderr goes to /dev/null), and killing it
    leaves none behind."""
    parent, child = container_cgroup
    second = os.path.join(parent, f"docker-{'7a' * 32}.scope")
    (path, other) = files(data_dir, [256 * KiB, 64 * KiB])
    port = _free_loopback_port()
    tool = exporter(parent, port, runtime(tmp_path, "exec sleep 600"))
    procs = [reader(child, [], [path])]
    try:
        attached(tool)
        pipes_before = pipes(tool.pid)
        started = time.monotonic()
        go(procs[0])
        row, during, slowest = rows_within(port, CONTAINER_ASK_S - 3, os.stat(child).st_ino)
        pipes_asking = pipes(tool.pid)
        assert row is None, "the row came before its runtime answered"
        assert slowest < 1.0, f"a scrape took {slowest:.2f} s while the runtime hung"
        row, _, slowest = rows_within(port, CONTAINER_ASK_S + 5, os.stat(child).st_ino)
        waited = time.monotonic() - started
        pipes_after = pipes(tool.pid)
        os.mkdir(second)
        procs.append(reader(second, [], [other]))
        go(procs[1])
        second_row, _, _ = rows_within(port, 3, os.stat(second).st_ino)
    finally:
        for proc in procs:
            finish(proc)
        stopped(tool)
        if os.path.isdir(second):
            _leave(second)
    misses = len(cached_since_eviction(path))
    assert _counts(during)["misses"] == misses == 256 * KiB // PAGE
    assert slowest < 1.0
    assert row is not None and row["container"] is None and row["misses"] == misses
    assert CONTAINER_ASK_S - 1 <= waited <= CONTAINER_ASK_S + 5
    assert (pipes_asking, pipes_after) == (pipes_before + 1, pipes_before)
    assert second_row is not None and second_row["container"] is None
    assert second_row["misses"] == len(cached_since_eviction(other)) == 64 * KiB // PAGE
    (asked,) = (tmp_path / "asked").read_text().splitlines()
    pid = int(asked.split()[0])
    assert not os.path.exists(f"/proc/{pid}"), "the hung runtime was not killed"


def test_stopping_the_exporter_while_a_runtime_hangs_takes_at_most_its_limit(  # noqa: F811
        data_dir, container_cgroup, tmp_path):
    """SIGTERM while the runtime hangs: the exporter exits 0 within
    CONTAINER_ASK_S + 2 s, and the runtime it ran is gone."""
    parent, child = container_cgroup
    (path,) = files(data_dir, [64 * KiB])
    with exporter_and_reader(parent, child, path, tmp_path, "exec sleep 600") as (tool, port):
        deadline = time.monotonic() + 10
        while not (tmp_path / "asked").exists() and time.monotonic() < deadline:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5):
                pass
            time.sleep(0.2)
        assert (tmp_path / "asked").exists(), "the runtime was never asked"
        start = time.monotonic()
        tool.terminate()
        _, err = tool.communicate(timeout=CONTAINER_ASK_S + 5)
        took = time.monotonic() - start
    assert tool.returncode == 0, err
    assert took <= CONTAINER_ASK_S + 2
    pid = int((tmp_path / "asked").read_text().split()[0])
    assert not os.path.exists(f"/proc/{pid}")
