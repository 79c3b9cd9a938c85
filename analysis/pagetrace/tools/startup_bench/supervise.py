"""startup-bench: running the command once, as the invoking user, in its own
process group; its readiness marker, its timeout, and its group's end."""
import contextlib
import os
import pwd
import re
import select
import signal
import subprocess
import sys
import time
from collections import deque, namedtuple

PROG = "startup-bench"
DROP_CACHES = "/proc/sys/vm/drop_caches"
GOVERNOR = "/sys/devices/system/cpu/cpu0/cpufreq/scaling_governor"
# After a readiness marker, the command gets this long to exit on SIGTERM.
TERM_GRACE_S = 2.0


def progress(message):
    print(f"{PROG}: {message}", file=sys.stderr, flush=True)


class BenchError(Exception):
    """Stops the whole session (bad input, missing helper): exit status 2."""


class NothingToDo(BenchError):
    """The trace was read but names no usable file: exit status 1."""


# ---------------------------------------------------------------------------
# Running the command once.

RunAs = namedtuple("RunAs", "uid gid groups name home")
Outcome = namedtuple("Outcome", "status elapsed_s detail")


def invoking_user():
    """The user behind sudo (SUDO_UID/SUDO_GID), or None to run as we are."""
    if os.geteuid() != 0 or "SUDO_UID" not in os.environ:
        return None
    uid = int(os.environ["SUDO_UID"])
    gid = int(os.environ.get("SUDO_GID", uid))
    try:
        entry = pwd.getpwuid(uid)
        return RunAs(uid, gid, os.getgrouplist(entry.pw_name, gid),
                     entry.pw_name, entry.pw_dir)
    except KeyError:
        return RunAs(uid, gid, [gid], str(uid), "/")


def popen_identity(run_as):
    """Popen arguments that drop to the invoking user, with its own HOME."""
    if run_as is None:
        return {}
    env = dict(os.environ, HOME=run_as.home, USER=run_as.name,
               LOGNAME=run_as.name)
    return {"user": run_as.uid, "group": run_as.gid,
            "extra_groups": run_as.groups, "env": env}


class ReadinessWatch:
    """Decides when a run is 'started': at exit, at a line of output that
    matches --ready-regex, or when --ready-file appears."""

    def __init__(self, regex=None, path=None):
        self.regex = re.compile(regex) if regex else None
        self.path = path
        self.pending = b""
        self.tail = deque(maxlen=20)

    @property
    def waits_for_marker(self):
        return bool(self.regex or self.path)

    def before_run(self):
        if self.path:
            try:
                os.unlink(self.path)
            except FileNotFoundError:
                pass

    def feed(self, data):
        """Take command output; True when a line matched the regex."""
        self.pending += data
        *lines, self.pending = self.pending.split(b"\n")
        matched = False
        for raw in lines:
            line = raw.decode("utf-8", "replace")
            self.tail.append(line)
            if self.regex and self.regex.search(line):
                matched = True
        return matched

    def file_appeared(self):
        return bool(self.path) and os.path.exists(self.path)


def _drain(fd, watch):
    """Read what output is there without blocking; True on a regex match."""
    matched = False
    while True:
        try:
            data = os.read(fd, 65536)
        except BlockingIOError:
            return matched
        if not data:
            return matched
        matched |= watch.feed(data)


def run_once(command, timeout_s, watch, run_as, start=None,
             spawning=contextlib.nullcontext):
    """Run the command in its own process group; time it; never hang.

    The exit is seen through a pidfd, so the time is exact (Popen.wait with a
    timeout polls with sleeps of up to 50 ms). On timeout the whole group is
    killed; after the run any process the command left behind is killed too.
    The time runs from `start` (perf_counter) when given: concurrent starts
    the prefetch just before the command. The command starts inside
    `spawning` (the throttled cgroup's, with --throttle).
    """
    watch.before_run()
    start = time.perf_counter() if start is None else start
    try:
        with spawning():
            proc = subprocess.Popen(command, stdin=subprocess.DEVNULL,
                                    stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                    start_new_session=True, **popen_identity(run_as))
    except OSError as exc:
        return Outcome("failed", 0.0, f"cannot run {command[0]}: {exc.strerror}")
    out_fd = proc.stdout.fileno()
    os.set_blocking(out_fd, False)
    pidfd = os.pidfd_open(proc.pid)
    poller = select.poll()
    poller.register(pidfd, select.POLLIN)
    poller.register(out_fd, select.POLLIN)
    try:
        return _watch_run(proc, start, timeout_s, watch, poller, pidfd, out_fd)
    finally:
        _kill_group(proc.pid, signal.SIGKILL)
        proc.wait()
        _wait_group_gone(proc.pid)
        os.close(pidfd)
        proc.stdout.close()


def _watch_run(proc, start, timeout_s, watch, poller, pidfd, out_fd):
    deadline = start + timeout_s if timeout_s else None
    # A file marker has no event to wait on: poll for it every millisecond.
    tick_ms = 1 if watch.path else None
    while True:
        wait_ms = tick_ms
        if deadline is not None:
            left_ms = max(0, int((deadline - time.perf_counter()) * 1000) + 1)
            wait_ms = left_ms if wait_ms is None else min(wait_ms, left_ms)
        events = dict(poller.poll(wait_ms))
        now = time.perf_counter()
        marked = (out_fd in events and _drain(out_fd, watch)) or watch.file_appeared()
        if marked:
            _stop_gracefully(proc)
            return Outcome("ok", now - start, "")
        if pidfd in events:
            return _exited(proc, now - start, watch, out_fd)
        if out_fd in events and events[out_fd] & select.POLLHUP:
            poller.unregister(out_fd)  # closed; keep waiting for the exit
        if deadline is not None and now >= deadline:
            _kill_group(proc.pid, signal.SIGKILL)
            return Outcome("timeout", now - start,
                           f"killed after {timeout_s:g} s (whole process group)")


def _exited(proc, elapsed, watch, out_fd):
    code = proc.wait()
    marked = _drain(out_fd, watch) or watch.file_appeared()
    if watch.waits_for_marker and not marked:
        return Outcome("failed", elapsed,
                       f"exited with status {code} before the readiness marker"
                       + _tail_text(watch))
    if code != 0:
        return Outcome("failed", elapsed, f"exited with status {code}" + _tail_text(watch))
    return Outcome("ok", elapsed, "")


def _tail_text(watch):
    if watch.pending:
        watch.feed(b"\n")
    lines = [line for line in watch.tail if line.strip()][-3:]
    return "; last output: " + " | ".join(lines) if lines else ""


def _kill_group(pgid, sig):
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def _wait_group_gone(pgid, limit_s=5.0):
    """Wait until no process of the group is left, so that none still maps
    files (or reads them) while the next run's cache state is prepared."""
    deadline = time.monotonic() + limit_s
    while time.monotonic() < deadline:
        try:
            os.killpg(pgid, 0)
        except ProcessLookupError:
            return
        except PermissionError:
            pass
        time.sleep(0.001)
        _kill_group(pgid, signal.SIGKILL)
    progress(f"warning: processes of group {pgid} still there {limit_s:g} s after SIGKILL")


def _stop_gracefully(proc):
    _kill_group(proc.pid, signal.SIGTERM)
    try:
        proc.wait(timeout=TERM_GRACE_S)
    except subprocess.TimeoutExpired:
        pass  # run_once's cleanup sends SIGKILL
