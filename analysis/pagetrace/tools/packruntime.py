"""`pagetrace pack --container / --cgroup`: one run of a target's start
recorded whole, the runtime's reads with the target's, merged into one
trace.

A container's start reads more than the container does: the starter (the
docker or podman client, and what it forks: podman's conmon and runc) and
the runtime's daemons (dockerd and containerd, and what they fork for the
start: the shim, runc) read their own binaries and libraries, and a cold
start waits for those reads too. Each run traces, with `trace --used -x`,
the target (its cgroup or container), the starter and its descendants
(`trace -- CMD`), and every runtime daemon running at that moment
(`trace -p PID`: the process and what it forks after the attach): the
daemons are the processes whose command name (/proc/PID/comm) or
executable's name is one of `daemons` (default dockerd and containerd).
The traces share trace's realtime clock and are merged through the core's
reader and writer into the run's one trace (merge_traces()).
Standard library only: it runs under sudo on the system Python.
"""
import contextlib
import os
import pwd
import signal
import subprocess
import sys
import threading

from pagetrace.core import process, tracefile, tracewriter
from pagetrace.core.escape import display_path, escape

# The runtime daemons traced by default (trace -p each): docker's daemon
# and containerd; the shim and runc are their children, forked at the start.
DEFAULT_DAEMONS = ("dockerd", "containerd")
# trace's readiness line (stderr): every program is attached.
TRACE_READY = "Tracing... Hit Ctrl-C to end."
# trace's line (stderr, after TRACE_READY) once its --container target is
# found and its cgroup traced: "trace: Tracing container NAME.".
TRACE_FOUND = "Tracing container "
# Seconds the target's trace may take, once the starter has succeeded, to
# say TRACE_FOUND. The starter ends after the runtime made the container
# (docker run returns once it started, or once it exited); trace sees its
# cgroup within milliseconds and checks its name with one inspect by the
# runtime's client, well under a second: the rest is a loaded machine's
# margin. Past it, the starter started no container of that name.
FOUND_S = 5
# trace's exit status when the command succeeded but events were lost.
TRACE_LOST = 3
# Seconds a target may run after its starter ended; a trace may take to
# end once told to.
TARGET_END_S = 600
STOP_S = 30


class TargetError(Exception):
    """The run failed: one line (packrecord turns it into its own error)."""


def daemon_pids(names, proc="/proc"):
    """[(pid, name)] of the running processes whose comm or executable's
    name is one of `names`, in pid order; this process is never one."""
    found = []
    for entry in os.listdir(proc):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        try:
            with open(os.path.join(proc, entry, "comm")) as f:
                comm = f.read().rstrip("\n")
        except OSError:
            continue    # gone
        name = comm if comm in names else _exe_name(os.path.join(proc, entry), names)
        if name:
            found.append((int(entry), name))
    return sorted(found)


def _exe_name(directory, names):
    """The executable's name if it is one of `names` (comm is cut to 15
    bytes, and a process may rename itself); None otherwise, or for a
    kernel thread or a process gone."""
    try:
        exe = os.path.basename(os.readlink(os.path.join(directory, "exe")))
    except OSError:
        return None
    return exe if exe in names else None


def _forward(lines):
    for line in lines:
        sys.stderr.write(line)
    sys.stderr.flush()


def spawn_trace(argv):
    """A trace process, its stderr piped (attached() reads it)."""
    return subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True,
                            preexec_fn=process.with_parent())


def attached(tracer):
    """True once the trace says it is attached; False if it ended before
    (its lines passed on, its status in .returncode)."""
    for line in tracer.stderr:
        if line.rstrip().endswith(TRACE_READY):
            return True
        _forward([line])
    _forward(tracer.stderr)
    tracer.wait()
    return False


class Announcements:
    """A trace's stderr after its readiness line, read by a thread. With
    `held` (a --container target's), its lines are held until it says
    TRACE_FOUND (.found), then passed on with the rest as they come;
    without, passed on as they come. .settled is set once it said
    TRACE_FOUND or closed its stderr (ended)."""

    def __init__(self, tracer, held):
        self.found, self.settled = False, threading.Event()
        self._held, self._lock = [] if held else None, threading.Lock()
        self._thread = threading.Thread(target=self._read, args=(tracer.stderr,), daemon=True)
        self._thread.start()

    def _read(self, lines):
        for line in lines:
            with self._lock:
                if self._held is None:
                    _forward([line])
                elif line.partition(": ")[2].startswith(TRACE_FOUND):
                    self.found = True
                    _forward(self._held)
                    self._held = None
                    self.settled.set()
                else:
                    self._held.append(line)
        self.settled.set()

    def pass_on(self, keep=0):
        """Passes on the lines held so far but the last `keep`, and returns
        those (the rest stays held)."""
        with self._lock:
            held = self._held or []
            if self._held:
                self._held = []
        _forward(held[:len(held) - keep])
        return held[len(held) - keep:]

    def end(self, tracer, timeout):
        """trace's exit status once it has ended (within `timeout` s; else
        None), its stderr read to its end."""
        try:
            tracer.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            return None
        self._thread.join(STOP_S)
        return tracer.returncode


def end_trace(tracer, timeout):
    """trace's exit status once it has ended (within `timeout` s; else
    None), its last lines passed on."""
    try:
        _, rest = tracer.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        return None
    _forward([rest])
    return tracer.returncode


def _user():
    """The starter runs as this process's user, as it would untraced (trace
    would run it as sudo's invoking user)."""
    return pwd.getpwuid(os.geteuid()).pw_name


def trace_run(base_argv, target, command, path, daemons=DEFAULT_DAEMONS):
    """One run of a target (`target`: trace's --cgroup PATH, or --container
    NAME --wait): the daemons' traces and the target's attach first, then
    `command`, the starter, runs under its own trace. A container's trace
    ends when the container exits (a starter that fails, or succeeds
    without starting it, ends the run: check_starter(), check_found()), a
    cgroup's is stopped once the starter has ended; then the daemons'
    traces are stopped (SIGINT), and the traces are merged into `path`.
    Returns the run's trace status: 0; TRACE_LOST when one of them lost
    events; else a failed trace's status. Every trace is stopped however
    this ends."""
    stem = path[:-4] if path.endswith(".log") else path
    tracers = []
    with contextlib.ExitStack() as stack:
        stack.callback(lambda: [process.stop(t, signal.SIGINT, STOP_S) for t in tracers])
        # Every trace attaches at once (a BPF load each); the starter waits for all.
        found = [(pid, f"{stem}.{name}-{pid}.log") for pid, name in daemon_pids(daemons)]
        for pid, part in found:
            tracers.append(spawn_trace([*base_argv, "-o", part, "-p", str(pid)]))
        target_part, starter_part = f"{stem}.target.log", f"{stem}.starter.log"
        target_tracer = spawn_trace([*base_argv, "-o", target_part, *target])
        tracers.append(target_tracer)
        daemon_tracers, daemon_parts = [], []
        for (pid, part), tracer in zip(found, tracers):
            if attached(tracer):
                daemon_tracers.append(tracer)
                daemon_parts.append(part)
            elif os.path.exists(f"/proc/{pid}"):
                return tracer.returncode
            # else: it ended meanwhile, nothing of it to record
        if not attached(target_tracer):
            return target_tracer.returncode
        announced = Announcements(target_tracer, held="--container" in target)
        starter = subprocess.Popen([*base_argv, "-o", starter_part, "--user", _user(), "--",
                                    *command], stdin=subprocess.DEVNULL,
                                   stdout=subprocess.DEVNULL, preexec_fn=process.with_parent())
        tracers.append(starter)
        starter_status = starter.wait()
        # A failed starter (no image, a name in use) ends the run at once:
        # the container it did not start would be waited for in vain.
        check_starter(command, starter_status, starter_part)
        if "--cgroup" in target:
            target_tracer.send_signal(signal.SIGINT)
        else:
            check_found(target, command, announced, target_tracer)
        statuses = [announced.end(target_tracer, TARGET_END_S)]
        if statuses[0] is None:
            raise TargetError(f"the target was still running {TARGET_END_S} s after "
                              f"{display_path(command[0])} ended: a pack records a "
                              "start-up, not a service's life (stop it, or use --cgroup)")
        for tracer in daemon_tracers:
            tracer.send_signal(signal.SIGINT)
            statuses.append(end_trace(tracer, STOP_S))
        status = run_status(statuses + [starter_status])
        if status == 0:
            merge_traces([target_part, starter_part, *daemon_parts], path, " ".join(command))
        return status


def check_starter(command, status, part):
    """Raises TargetError when the starter failed: a status other than 0,
    or trace's TRACE_LOST where its trace lost nothing (the starter's own)."""
    if status == 0 or (status == TRACE_LOST and part_lost(part)):
        return
    raise TargetError(f"{display_path(command[0])} exited with status {status}: "
                      "the target's start failed")


def check_found(target, command, announced, tracer):
    """After a starter that succeeded: returns once the target's trace has
    said TRACE_FOUND. Raises TargetError when it has not within FOUND_S s
    (the starter started no container of that name, which would be waited
    for in vain), or when it failed first: its last line is the reason
    (another container's cgroup made while it waited, say)."""
    settled = announced.settled.wait(FOUND_S)
    if announced.found:
        return
    name = display_path(target[target.index("--container") + 1])
    starter = display_path(command[0])
    if not settled:
        announced.pass_on()
        raise TargetError(f"container {name}: {starter} succeeded but started no container "
                          f"of that name (none within {FOUND_S} s)")
    if announced.end(tracer, STOP_S) == 0:
        announced.pass_on()     # told to stop (a signal) first: a run as before
        return
    why = "".join(announced.pass_on(keep=1)).rstrip("\n")
    why = why.partition(": ")[2] if why.startswith("trace: ") else why
    raise TargetError(f"container {name}: its trace failed before finding it, after "
                      f"{starter} succeeded: {why or 'it said nothing'}")


def part_lost(path):
    with contextlib.suppress(tracefile.TraceError):
        return (tracefile.read(path).trailer or {}).get("lost", 0) > 0
    return False


def run_status(statuses):
    """A run's status from its traces': a failure (None: a trace that did
    not end when told to, as 1) before lost events, before 0."""
    failed = [1 if s is None else s for s in statuses if s != 0]
    other = [s for s in failed if s != TRACE_LOST]
    return other[0] if other else TRACE_LOST if failed else 0


def _key(record):
    return (record.kind, record.path, record.offset, *record.extras)


def merged_records(traces):
    """The records of `traces` (one clock: trace's realtime) in time order.
    A task that two of the traces follow (the container's, under containerd
    too) is in both: an event is kept as many times as the trace that holds
    it most often has it, so each is counted once."""
    kept, seen = [], {}
    for trace in traces:
        counts = {}
        for record in trace.records:
            key = _key(record)
            counts[key] = counts.get(key, 0) + 1
            if counts[key] > seen.get(key, 0):
                kept.append(record)
        for key, count in counts.items():
            seen[key] = max(seen.get(key, 0), count)
    kept.sort(key=lambda r: r.ts_us)
    return kept


def _check_alike(traces):
    first = traces[0].header
    for trace in traces[1:]:
        if (trace.header.page_size, trace.header.columns) != (first.page_size, first.columns):
            raise tracefile.TraceError(trace.source, "cannot be merged with "
                                       f"{first.source}: another page size or columns")


def merge_traces(paths, output, command):
    """Writes the traces at `paths` (trace --used, the same columns) as one
    trace at `output`, through the core's writer: their records in time
    order, each event once (merged_records()), the trailer their sums."""
    traces = [tracefile.read(p) for p in paths]
    _check_alike(traces)
    first = traces[0].header
    records = merged_records(traces)
    kinds = set().union(*(t.header.kinds for t in traces))
    fields = {"command": command,
              "merged": " ".join(display_path(os.path.basename(p)) for p in paths)}
    fields.update({k: first.keys[k] for k in ("start", "kernel", "host", "tracer")
                   if k in first.keys})
    reads = [r for r in records if r.kind == "read"]
    times = [r.ts_us for r in records]
    lost = sum((t.trailer or {}).get("lost", 0) for t in traces)
    with open(output, "w", encoding="utf-8", errors="surrogateescape") as out:
        out.write(tracewriter.header(first.page_size, first.extra_names, kinds, fields))
        for r in records:
            out.write(tracewriter.record_line(r.ts_us, r.path, r.offset,
                                              (r.kind, *map(escape, r.extras))))
        out.write(tracewriter.trailer(
            len(reads), first.page_size,
            len({r.path for r in reads if not tracefile.is_metadata(r.path)}),
            max(times) - min(times) if times else 0, lost,
            sum(r.kind == "access" for r in records), sum(r.kind == "map" for r in records)))
    return len(records)
