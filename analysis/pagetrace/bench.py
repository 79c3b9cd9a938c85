"""startup-bench: time a program's startup in controlled page-cache states.

    startup-bench --trace reads.log -n 20 -- firefox-esr --headless ...
    pagetrace startup --trace reads.log -n 20 -- firefox-esr --headless ...

States, run in interleaved order (one of each per iteration) so that drift
over the session spreads over all of them:

  cold        sync + drop_caches: the whole page cache emptied (root only)
  selective   only the trace's files evicted (POSIX_FADV_DONTNEED)
  hot         the trace's files read into the cache first
  prefetched  selective, then `replay --sorted --prefetch TRACE`, then run
  prefetched-used
              selective, then `replay --sorted --prefetch USED_PAGES` (only
              the pages the start-up used), then run
  concurrent  selective, then `replay --prefetch USED_PAGES` (first-access
              order) and the command started together, as Android's iorap
              did; timed from when both began
  prefetched-merged, concurrent-merged
              as prefetched-used and concurrent, with MERGED_PAGES;
              concurrent-merged with `replay --window` (--prefetch-window)
USED_PAGES is compiled once per session from a `trace --used` trace (the
first --used-trace), MERGED_PAGES from every --used-trace, the pages
between those that vary from run to run filled in (--fill-varying) and
the program's own preloads added (--merged-preloads): used_pages.
  launched    selective, then `pagetrace launch PACK -- CMD` (--pack): what
              users deploy, the mode chosen by the launch; timed from the
              launch's start
  launched-stale
              as launched, with a copy of PACK in which every file's inode
              is one no file has: every file stale, nothing prefetched
  simulated   selective, then `replay TRACE` (O_DIRECT, original order),
              then warm the files and run: "simulated I/O + hot start",
              the 2011 check against a real (selectively) cold start

Writes every run to a CSV (docs/data-formats.md, "startup-bench runs",
pagetrace.startup_csv) and prints mean, median and 95% confidence interval
(Student's t) per state. Part of the standard-library core, so that it runs
under sudo with the system Python; the cache states are made with
pagetrace.cache and the trace (its `read` records) is read by
pagetrace.tracefile.
"""

import argparse
import contextlib
import json
import os
import pwd
import re
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections import deque, namedtuple

from . import __version__, cache, packfile, throttle, tracefile
from .frontdoor import find_c_tool
from .escape import display_path, escape
from .startup_csv import (BESIDE_STATES, LAUNCH_STATES, MERGED_STATES,
                          STATES, USED_STATES,
                          Run, StartupCsvError,
                          best_prefetch_state, comparisons, header_row,
                          prefetch_gains, read_runs, run_row, summarize)

PROG = "startup-bench"
DROP_CACHES = "/proc/sys/vm/drop_caches"
GOVERNOR = "/sys/devices/system/cpu/cpu0/cpufreq/scaling_governor"
# After a readiness marker, the command gets this long to exit on SIGTERM.
TERM_GRACE_S = 2.0


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


# ---------------------------------------------------------------------------
# Cache states.

def find_launcher():
    """The `pagetrace` front door: scripts/pagetrace of the source tree,
    else the one installed beside this script, else on PATH."""
    from .frontdoor import TREE_TOP
    for candidate in (os.path.join(TREE_TOP, "scripts", "pagetrace"),
                      os.path.join(os.path.dirname(os.path.realpath(
                          sys.argv[0] or ".")), "pagetrace")):
        if os.path.isfile(candidate):
            return candidate
    return shutil.which("pagetrace") or "pagetrace"


def stale_copy(pack_path, directory):
    """A copy of the pack in which every file's inode is one no file has
    (launched-stale): a pack whose files were all replaced."""
    pack = packfile.read(pack_path)
    files = [f._replace(ino=f.ino + (1 << 40)) for f in pack.files]
    path = os.path.join(directory, "stale.pack")
    packfile.write(pack._replace(files=files), path)
    return path


def find_replay(explicit):
    """The replayer: --replay, else replay/replay of the source tree, else
    pagetrace-replay installed beside this script, else on PATH."""
    if explicit:
        return explicit if os.access(explicit, os.X_OK) else None
    return find_c_tool("replay")


def refusals(states, replay, explicit_replay, used_refusal=None, pack=None):
    """{state: reason} for the states that cannot run here; used_refusal
    is why no trace with access records is at hand (used_trace)."""
    refused = {}
    for state in LAUNCH_STATES:
        if state in states and not pack:
            refused[state] = "needs a pack: give --pack PACK (pagetrace pack)"
    if "cold" in states:
        reason = _cold_refusal()
        if reason:
            refused["cold"] = reason
    for state, how in (("prefetched", "replay --sorted --prefetch"),
                       ("prefetched-used", "replay --sorted --prefetch --used"),
                       ("concurrent", "replay --prefetch --used"),
                       ("prefetched-merged", "replay --sorted --prefetch --used"),
                       ("concurrent-merged", "replay --prefetch --used"),
                       ("simulated", "replay (O_DIRECT, original order)")):
        if state not in states:
            continue
        if not replay:
            where = (f"{explicit_replay} is not an executable file" if explicit_replay
                     else "not found as <repo>/replay/replay, beside this "
                     "script as pagetrace-replay, nor on PATH")
            refused[state] = (f"needs the replayer ({how}), which is missing: "
                              f"{where}; build it (make -C replay) or give --replay PATH")
        elif state in USED_STATES and used_refusal:
            refused[state] = used_refusal
    return refused


def used_traces(trace_path, used_paths):
    """([traces], None) of the traces whose access records say which pages
    the start-up used: every --used-trace, else the --trace itself; (None,
    why) when one has none. tracefile.TraceError when one cannot be read."""
    traces = []
    for path in used_paths or [trace_path]:
        trace = tracefile.read(path)
        if not any(r.kind in ("access", "map") for r in trace.records):
            return None, (f"needs a trace with access records (the pages the "
                          f"start-up used), and {display_path(path)} has none "
                          f"(format version {trace.header.version}): record one "
                          "with trace --used -c CMD and give it as --used-trace "
                          "FILE (or as --trace)")
        traces.append(trace)
    return traces, None


def used_pages(traces, directory, name="used-pages.log", fill=0,
               preloads=False, preload_traces=()):
    """Compiles `trace --used` traces into the list that the used states
    prefetch: the read pages that have an access or map record (what
    `replay --used` keeps), each once, in the order of their first access,
    as a version 1 trace in `directory`. Done once per session, before the
    timing, as iorap compiled its traces ahead of a launch: the timed
    replay then reads this list, not the whole trace (on firefox-esr 35,554
    records instead of 141,000, 80 ms less of parsing at the start).

    Several traces (runs of the same start-up) give the union of their
    used pages, each at its earliest first access counted from the start
    of its own trace. `fill`: pages used in some of the traces and not in
    all of them vary from run to run, and a run touches others near them
    that no traced run did (firefox-esr: its unwind tables, .eh_frame); a
    miss there costs the start a fault read-around of up to read_ahead_kb,
    so the pages between two varying pages of a file at most `fill` pages
    apart are added, right after the first of the two. `preloads`: the
    forced-readahead reads (cause forced_ra: readahead(2), MADV_WILLNEED,
    fadvise WILLNEED) of the traces are added too, used or not, at the time
    of the read: the program asks for them itself, and a cold start waits
    for them; and those of `preload_traces` (a trace recorded with another
    read_ahead_kb, whose preloads read more), at the time of the first
    preload of the same file in the traces, which keep the list's clock.
    Returns (path, number of pages)."""
    first = _first_accesses(traces)
    added = {}
    if fill > 0 and len(traces) > 1:
        added.update(_fill_varying(traces, first, fill))
    if preloads:
        own = _preloads(traces)
        since = {}
        for (path, _), when in own.items():
            since[path] = min(since.get(path, when), when)
        others = _preloads(preload_traces, number=len(traces))
        for (path, offset), when in others.items():
            if path in since:
                others[(path, offset)] = since[path][:1] + when[1:]
        for key, when in {**others, **own}.items():
            if key not in first and key not in added:
                added[key] = when
    start = _trace_start(traces[0]) if traces else 0
    listed = sorted({**first, **added}.items(), key=lambda kv: kv[1])
    sources = ", ".join(escape(t.source) for t in traces)
    lines = [f"# pagetrace-format: 1\n# page-size: {traces[0].header.page_size}\n"
             f"# command: used pages of {sources}, in first-access order\n"]
    lines += [f"{start + when[0]} {escape(path)} {offset}\n"
              for (path, offset), when in listed]
    path = os.path.join(directory, name)
    with open(path, "w", encoding="utf-8", errors="surrogateescape") as f:
        f.writelines(lines)
    return path, len(listed)


def _trace_start(trace):
    return min((r.ts_us for r in trace.records), default=0)


def _first_accesses(traces):
    """{(path, offset): (us since its trace's start, trace, record, 0)} of
    the read pages with an access or map record, the earliest over the
    traces; the last field orders the pages filled in after one."""
    first = {}
    for number, trace in enumerate(traces):
        read = {(r.path, r.offset) for r in trace.records if r.kind == "read"}
        start = _trace_start(trace)
        for order, r in enumerate(trace.records):
            key = (r.path, r.offset)
            when = (r.ts_us - start, number, order, 0)
            if r.kind in ("access", "map") and key in read and (
                    key not in first or when < first[key]):
                first[key] = when
    return first


def _fill_varying(traces, first, fill):
    """The pages between two varying pages (in the list from some traces,
    not from all) of a file at most `fill` pages apart, not listed yet,
    each placed right after the lower varying page, in file order."""
    used = [set(_first_accesses([t])) for t in traces]
    varying = {}
    for path, offset in set.union(*used) - set.intersection(*used):
        varying.setdefault(path, []).append(offset)
    page = traces[0].header.page_size
    added = {}
    for path, offsets in varying.items():
        offsets.sort()
        for low, high in zip(offsets, offsets[1:]):
            if high - low > fill * page:
                continue
            for offset in range(low + page, high, page):
                if (path, offset) not in first:
                    added[(path, offset)] = first[(path, low)][:3] + (offset,)
    return added


def _preloads(traces, number=0):
    """{(path, offset): when} of the forced-readahead reads of `traces`
    (traces without a cause column have none), numbered from `number`."""
    found = {}
    for number, trace in enumerate(traces, start=number):
        columns = trace.header.columns
        if "cause" not in columns:
            continue
        # extras are the columns after timestamp, path, offset (and kind).
        cause = columns.index("cause") - (4 if "kind" in columns else 3)
        start = _trace_start(trace)
        for order, r in enumerate(trace.records):
            key = (r.path, r.offset)
            if (r.kind == "read" and len(r.extras) > cause
                    and r.extras[cause] == "forced_ra"
                    and not tracefile.is_metadata(r.path)):
                when = (r.ts_us - start, number, order, 0)
                if key not in found or when < found[key]:
                    found[key] = when
    return found


def _cold_refusal():
    if os.geteuid() != 0:
        return ("dropping the whole page cache (sync; echo 3 > "
                f"{DROP_CACHES}) needs root: run under sudo, or leave cold "
                "out of --states")
    try:
        os.close(os.open(DROP_CACHES, os.O_WRONLY))
    except OSError as exc:
        return f"cannot write {DROP_CACHES}: {exc.strerror}"
    return None


def drop_all_caches():
    os.sync()
    with open(DROP_CACHES, "w") as f:
        f.write("3\n")


class CacheStates:
    """Puts the page cache in each state, with pagetrace.cache."""

    def __init__(self, pagecache, trace, paths, replay, trace_path,
                 used_trace_path=None, prefetch_limit_s=60.0,
                 merged_trace_path=None, window=None):
        self.pagecache = pagecache
        self.trace = trace
        self.paths = paths
        self.replay = replay
        self.trace_path = trace_path
        self.used_trace_path = used_trace_path
        self.merged_trace_path = merged_trace_path
        # concurrent-merged: replay --window, so that the device reads the
        # list in about its order (None: no limit).
        self.window = window
        # How long a concurrent prefetch may outlive its start-up.
        self.prefetch_limit_s = prefetch_limit_s
        # --throttle: the replays (prefetch, simulated I/O) and the command
        # start in the throttled cgroup; the preparation here does not.
        self.spawning = contextlib.nullcontext
        self.method = pagecache.choose_method()[0]
        # launched: set by run_session with --pack.
        self.pack = self.stale_pack = None
        self.command = []
        self.warned_resident = set()
        self.warned_unmeasured = False
        self.warned_unverified = False

    def launch_argv(self, state):
        """`pagetrace launch` of the pack before the command (launched),
        or of its stale copy (launched-stale)."""
        pack = self.stale_pack if state == "launched-stale" else self.pack
        # -I -S: the launch needs the standard library only, and the
        # site-packages' .pth files cost tens of ms before the prefetch.
        return [sys.executable, "-I", "-S", find_launcher(), "launch", "-q",
                *(["--replay", self.replay] if self.replay else []), pack, "--",
                *self.command]

    def evict(self):
        results, _ = self.pagecache.evict_files(self.paths, self.method)
        unverified = [r for r in results if r["status"] == "unverified"]
        if unverified and not self.warned_unverified:
            self.warned_unverified = True
            progress(f"warning: eviction of {len(unverified)} file(s) could not be "
                     f"verified: {unverified[0]['reason']}")
        for r in results:
            if r["status"] in ("partial", "refused") and r["path"] not in self.warned_resident:
                self.warned_resident.add(r["path"])
                why = r.get("reason") or "; ".join(p["reason"] for p in r["resident"][:2])
                progress(f"warning: {display_path(r['path'])}: "
                         f"eviction {r['status']}: {why}")

    def warm(self):
        self.pagecache.warm_files(self.paths, self.method)

    def cold_fraction(self):
        """Share of the traced pages not cached now; None if not measurable."""
        try:
            cached, total = self.pagecache.traced_residency(self.trace, self.method)
        except OSError as exc:
            if not self.warned_unmeasured:
                self.warned_unmeasured = True
                progress(f"warning: cold_fraction not measured: {exc.strerror}")
            return None
        return 1.0 - cached / total if total else None

    def run_replay(self, *options, trace=None):
        """(seconds, error or None) of one replay run."""
        start = time.perf_counter()
        return self.finish_replay(self.start_replay(*options, trace=trace), start)

    def start_replay(self, *options, trace=None):
        """Starts a replay of `trace` (default --trace) in the background; a
        thread notes when it ends, so that its time is exact however late
        finish_replay is called."""
        replay = {"command": [self.replay, *options, trace or self.trace_path]}
        try:
            with self.spawning():
                proc = subprocess.Popen(replay["command"], stdin=subprocess.DEVNULL,
                                        stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        except OSError as exc:
            raise BenchError(f"{self.replay}: cannot run: {exc.strerror}") from None

        def wait():
            replay["stderr"] = proc.communicate()[1]
            replay["end"] = time.perf_counter()

        replay.update(proc=proc, thread=threading.Thread(target=wait, daemon=True))
        replay["thread"].start()
        return replay

    def finish_replay(self, replay, start, limit_s=None):
        """(seconds from `start` to the replay's end, error or None); a
        replay still running after limit_s more seconds is killed."""
        replay["thread"].join(limit_s)
        if replay["thread"].is_alive():
            replay["proc"].kill()
            replay["thread"].join()
        command, proc = replay["command"], replay["proc"]
        elapsed = replay["end"] - start
        if proc.returncode != 0:
            message = replay["stderr"].decode("utf-8", "replace").strip().splitlines()
            return elapsed, (f"{' '.join(command)} exited with status "
                             f"{proc.returncode}: " + (message[-1] if message else ""))
        return elapsed, None


def prepare_and_run(state, caches, bench):
    """One run of one state: (Run fields except run/iteration, detail)."""
    cold_fraction = prefetch_s = None
    if state == "cold":
        drop_all_caches()
    elif state == "hot":
        caches.warm()
    else:
        caches.evict()
        cold_fraction = caches.cold_fraction()
    merged = state in MERGED_STATES
    listed = caches.merged_trace_path if merged else caches.used_trace_path
    if state in BESIDE_STATES:
        return run_concurrent(state, listed, caches, bench, cold_fraction)
    if state in LAUNCH_STATES:
        outcome = bench(state, None, caches.launch_argv(state))
        return ((outcome.status, outcome.elapsed_s, None, outcome.elapsed_s,
                 cold_fraction), outcome.detail)
    if state == "prefetched":
        prefetch_s, error = caches.run_replay("--sorted", "--prefetch")
    elif state in ("prefetched-used", "prefetched-merged"):
        prefetch_s, error = caches.run_replay("--sorted", "--prefetch",
                                              trace=listed)
    elif state == "simulated":
        prefetch_s, error = caches.run_replay()
        caches.warm()  # O_DIRECT left the cache cold: the start itself is hot
    else:
        error = None
    if error:
        return ("failed", None, prefetch_s, None, cold_fraction), error
    outcome = bench(state)
    total = outcome.elapsed_s + (prefetch_s or 0.0)
    return (outcome.status, outcome.elapsed_s, prefetch_s, total, cold_fraction), outcome.detail


def run_concurrent(state, listed, caches, bench, cold_fraction):
    """concurrent(-merged): the prefetch of the list `listed`, in
    first-access order, and the command start together, as Android's iorap
    did at an app's launch. The start-up is timed from when both began, so
    its time is the total; the prefetch's own time (prefetch_s) overlaps
    it."""
    window = ["--window", caches.window] if state in MERGED_STATES and caches.window else []
    start = time.perf_counter()
    replay = caches.start_replay("--prefetch", *window, trace=listed)
    outcome = bench(state, start)
    # The prefetch outlived the start-up: wait (it is bounded by its trace)
    # so that it does not read into the next run's cache state.
    prefetch_s, error = caches.finish_replay(replay, start,
                                             limit_s=caches.prefetch_limit_s)
    if error:
        return ("failed", outcome.elapsed_s, prefetch_s, None, cold_fraction), error
    return ((outcome.status, outcome.elapsed_s, prefetch_s, outcome.elapsed_s,
             cold_fraction), outcome.detail)


# ---------------------------------------------------------------------------
# Raw runs (CSV) and their summary.

class RunWriter:
    """Writes each run as it ends, so an interrupted session keeps its runs."""

    def __init__(self, path):
        try:
            self.file = open(path, "w", newline="") if path else None
        except OSError as exc:
            raise BenchError(f"{path}: {exc.strerror}") from None
        if self.file:
            self.file.write(header_row() + "\n")
            self.file.flush()

    def write(self, run):
        if not self.file:
            return
        self.file.write(run_row(run) + "\n")
        self.file.flush()

    def close(self):
        if self.file:
            self.file.close()


def read_runs_csv(path):
    """The runs of a CSV written by startup-bench (for --summarize)."""
    try:
        return read_runs(path)
    except StartupCsvError as exc:
        raise BenchError(str(exc)) from None
    except OSError as exc:
        raise BenchError(f"{path}: {exc.strerror}") from None


def _fmt(value, digits=3, suffix=""):
    return "-" if value is None else f"{value:.{digits}f}{suffix}"


def print_summary(summary, compared, notes, out):
    head = ("state", "ok/runs", "mean_s", "median_s", "95% CI (s)", "±%",
            "elapsed_s", "prefetch_s", "cold_frac")
    rows = [head]
    for state, f in summary.items():
        ci = ("-" if f["ci95_low_s"] is None
              else f"{f['ci95_low_s']:.3f}-{f['ci95_high_s']:.3f}")
        rows.append((state, f"{f['ok']}/{f['runs']}", _fmt(f["mean_s"]),
                     _fmt(f["median_s"]), ci, _fmt(f["ci95_half_percent"], 1),
                     _fmt(f["elapsed_mean_s"]), _fmt(f["prefetch_mean_s"]),
                     _fmt(f["cold_fraction_mean"], 3)))
    widths = [max(len(r[i]) for r in rows) for i in range(len(head))]
    for row in rows:
        print("  ".join(c.ljust(w) if i == 0 else c.rjust(w)
                        for i, (c, w) in enumerate(zip(row, widths))), file=out)
    labels = (("simulated_vs_selective_percent", "simulated vs real cold (selective)"),
              ("simulated_vs_cold_percent", "simulated vs real cold (drop_caches)"))
    for key, label in labels:
        if compared.get(key) is not None:
            print(f"{label}: {compared[key]:+.1f}%", file=out)
    if compared.get("selective_minus_hot_s") is not None:
        print(f"I/O cost (selective - hot): {compared['selective_minus_hot_s']:.3f} s",
              file=out)
    for state, gain in compared.get("prefetch_gains", {}).items():
        print(gain_text(state, gain), file=out)
    best = compared.get("best_prefetch_state")
    if best:
        print(f"best prefetch state: {best}, recovers "
              f"{_percent_text(compared['prefetch_gains'][best]['recovered_fraction'])} "
              "of the I/O cost", file=out)
    for note in notes:
        print(note, file=out)


def _percent_text(fraction):
    return "-" if fraction is None else f"{100 * fraction:.0f}%"


def _interval_text(low, high, form):
    """`95% CI LOW to HIGH%` with `form` (e.g. "+.1f"), or why there is none."""
    if low is None or high is None:
        return "95% CI not bounded"
    return f"95% CI {low:{form}} to {high:{form}}%"


def gain_text(state, gain):
    """`prefetched-used (total) vs selective: -20.1% (95% CI -25.0 to
    -15.2%); recovers 67% of the I/O cost (95% CI 50 to 84%), 10 paired
    iteration(s)`"""
    change = gain["vs_selective_percent"]
    text = f"{state} (total) vs selective: " + (
        "-" if change is None else
        f"{change:+.1f}% (" + _interval_text(gain["vs_selective_ci95_low_percent"],
                                             gain["vs_selective_ci95_high_percent"],
                                             "+.1f") + ")")
    if gain["recovered_iterations"]:
        low, high = gain["recovered_ci95_low"], gain["recovered_ci95_high"]
        text += (f"; recovers {_percent_text(gain['recovered_fraction'])} of the "
                 "I/O cost (" + _interval_text(None if low is None else 100 * low,
                                               None if high is None else 100 * high,
                                               ".0f") + ")")
    return text + f", {gain['iterations']} paired iteration(s)"


# ---------------------------------------------------------------------------
# The session.

def progress(message):
    print(f"{PROG}: {message}", file=sys.stderr, flush=True)


def governor_note():
    try:
        with open(GOVERNOR) as f:
            governor = f.read().strip()
    except OSError:
        return None
    return governor


def load_trace(pagecache, path):
    """The trace (its read records) and its files that exist; notes about
    the rest on stderr. tracefile.TraceError when the trace is refused."""
    trace = pagecache.read_trace(path)
    for note in pagecache.trace_notes(trace):
        progress(note)
    paths, problems = pagecache.collect_files(list(trace.pages))
    for problem in problems:
        progress(f"{problem} (left out of eviction and warming)")
    if not paths:
        raise NothingToDo(f"{path}: the trace names no file that exists "
                          "here: nothing to make cold or hot")
    return trace, paths


def run_session(args, command, pagecache):
    used = used_refusal = None
    if args.states is None or any(s in USED_STATES for s in args.states):
        used, used_refusal = used_traces(args.trace, args.used_trace)
    if args.states is None:
        # By default the used states run when a trace with access records
        # is at hand (--used-trace given, or --trace has them); the merged
        # ones only when asked for.
        args.states = [s for s in STATES if s not in MERGED_STATES and (
            s not in USED_STATES or used or args.used_trace)
            and (s not in LAUNCH_STATES or args.pack)]
    states = args.states
    replay = find_replay(args.replay)
    refused = refusals(states, replay, args.replay, used_refusal, args.pack)
    for state, reason in refused.items():
        progress(f"state {state} refused: {reason}")
    active = [s for s in states if s not in refused]
    trace, paths = load_trace(pagecache, args.trace)
    used_list = merged_list = None
    if used and any(s in USED_STATES for s in active):
        for path in args.used_trace or []:
            if path != args.trace:
                # Every evicting state makes the same files cold: the used traces' too.
                paths = list(dict.fromkeys(paths + load_trace(pagecache, path)[1]))
        # Removed when the session's objects go, at the latest at exit.
        args.scratch = tempfile.TemporaryDirectory(prefix="startup-bench-")
        if any(s not in MERGED_STATES for s in active if s in USED_STATES):
            used_list, count = used_pages(used[:1], args.scratch.name)
            progress(f"{count} used pages of {display_path(used[0].source)}, in "
                     f"first-access order: {used_list}")
        if any(s in MERGED_STATES for s in active):
            merged_list, count = merged_pages(args, used)
            progress(f"{count} pages in the merged list of {len(used)} used "
                     f"trace(s), in first-access order: {merged_list}")
    # A concurrent prefetch may outlive its start-up as long as a run may
    # take (--timeout, at least 60 s): a slow device (a 150-IOPS profile)
    # can need tens of seconds for a first-access-order list.
    caches = CacheStates(pagecache, trace, paths, replay, args.trace, used_list,
                         prefetch_limit_s=max(60.0, args.timeout),
                         merged_trace_path=merged_list,
                         window=args.prefetch_window)
    if args.pack and any(s in LAUNCH_STATES for s in active):
        caches.pack, caches.command = os.path.abspath(args.pack), command
        if "launched-stale" in active:
            args.stale_scratch = tempfile.TemporaryDirectory(prefix="startup-bench-")
            os.chmod(args.stale_scratch.name, 0o755)
            caches.stale_pack = stale_copy(args.pack, args.stale_scratch.name)
    run_as = invoking_user()
    watch = ReadinessWatch(args.ready_regex, args.ready_file)
    governor = governor_note()
    with contextlib.ExitStack() as session:
        if args.limits:
            start_throttle(args, session, caches, paths)
        runs = run_states(args, command, active, caches, run_as, watch, governor)
    return runs, refused, governor, run_as, replay, caches.method


def merged_pages(args, used):
    """The merged list: every used trace, --fill-varying, and with
    --merged-preloads the forced readahead of those traces and of --trace
    (recorded with the disk's own read_ahead_kb, where the used traces may
    have been recorded with 0, which shortens what a preload reads)."""
    others = []
    if args.merged_preloads and args.trace not in (args.used_trace or [args.trace]):
        others.append(tracefile.read(args.trace))
    return used_pages(used, args.scratch.name, "merged-pages.log",
                      fill=args.fill_varying, preloads=args.merged_preloads,
                      preload_traces=others)


def run_states(args, command, active, caches, run_as, watch, governor):
    """Every run of the session, interleaved by iteration."""
    paths = caches.paths
    progress(f"{len(active)} state(s) x {args.n} run(s); {len(paths)} traced "
             f"file(s); cache method {caches.method}; command runs as "
             + (f"{run_as.name} (uid {run_as.uid}, from SUDO_UID)" if run_as
                else f"uid {os.geteuid()}")
             + (f"; cpu0 frequency governor: {governor}" if governor else
                "; no cpufreq governor exposed"))
    writer = RunWriter(args.csv)
    runs = []
    try:
        for iteration in range(args.n):
            for state in active:
                fields, detail = prepare_and_run(
                    state, caches, lambda s, start=None, argv=None: run_once(
                        argv or command, args.timeout, watch, run_as, start,
                        caches.spawning))
                run = Run(len(runs), state, iteration, *fields,
                          throttle=throttle.label(args.limits))
                runs.append(run)
                writer.write(run)
                report_progress(run, len(active) * args.n, detail)
    finally:
        writer.close()
    return runs


def start_throttle(args, session, caches, paths):
    """The throttled cgroup on the disks of the trace's files, for the whole
    session; removed when `session` closes (also on error and Ctrl-C).
    args.throttled describes it for the output."""
    disks = throttle.disks_of(paths)
    cgroup = session.enter_context(throttle.Cgroup(args.limits, disks, "startup-bench"))
    caches.spawning = cgroup.spawning
    args.throttled = {"profile": args.limits.profile, "riops": args.limits.riops,
                      "rbps": args.limits.rbps, "cgroup": cgroup.version,
                      "devices": [throttle.dev_text(d) for d in disks]}
    progress(f"throttled: {throttle.describe(args.limits)} on "
             f"{' '.join(args.throttled['devices'])} (blk-throttle, cgroup "
             f"{cgroup.version}): the command, its children and the replays")


def report_progress(run, total_runs, detail):
    parts = [f"[{run.run + 1}/{total_runs}] {run.state} #{run.iteration}: {run.status}"]
    if run.elapsed_s is not None:
        parts.append(f" {run.elapsed_s:.3f} s")
    if run.prefetch_s is not None:
        beside = " beside it" if run.state in BESIDE_STATES else ""
        parts.append(f" (replay {run.prefetch_s:.3f} s{beside}, total {_fmt(run.total_s)} s)")
    if run.cold_fraction is not None:
        parts.append(f", {100 * run.cold_fraction:.1f}% of traced pages cold before")
    if detail:
        parts.append(f": {detail}")
    progress("".join(parts))


def summary_document(args, command, runs, summary, compared, extra):
    document = {"tool": "startup-bench", "format": 1, "trace": args.trace, "command": command,
                "iterations": args.n, "states": list(args.states),
                "kernel": os.uname().release, "summary": summary,
                "comparisons": compared, "runs": [r._asdict() for r in runs]}
    document.update(extra)
    return document


EXAMPLES = """\
examples:
  sudo startup-bench --trace reads.log -n 20 --csv runs.csv -- \\
      firefox-esr --headless --screenshot /tmp/s.png about:blank
  sudo startup-bench --trace app.log -n 10 --states selective,hot \\
      --ready-regex 'listening on' -- ./server
  sudo trace --used -o used.log -c 'firefox-esr --headless ...'
  sudo startup-bench --trace used.log -n 10 \\
      --states selective,hot,prefetched,prefetched-used,concurrent -- firefox-esr ...
  sudo startup-bench --trace reads.log --used-trace used1.log \\
      --used-trace used2.log --used-trace used3.log -n 20 --merged-preloads \\
      --states selective,hot,concurrent,concurrent-merged -- firefox-esr ...
  sudo startup-bench --trace used.log -n 10 --device-profile hdd-150 \\
      -o hdd.csv -- firefox-esr ...        # as on a 150-IOPS disk
  startup-bench --summarize runs.csv --json

exit status: 0 every run ok; 1 a run failed or timed out, a state was
refused (cold without root, a prefetch state or simulated without replay,
a used or merged state without access records), or the
trace was refused (empty, binary, unknown version, bad header) or names no
file that exists, or --throttle could not be set up (not root, no
blk-throttle, a file on tmpfs or an overlay); 130 on SIGINT, SIGTERM or
SIGHUP; 2 bad usage, a bad --throttle value or profile, or an unreadable
runs CSV.
"""


def parse_states(text):
    states = [s.strip() for s in text.split(",") if s.strip()]
    unknown = [s for s in states if s not in STATES]
    if unknown or not states:
        raise argparse.ArgumentTypeError(
            f"unknown state(s) {','.join(unknown) or '(none given)'}: "
            f"choose from {','.join(STATES)}")
    return list(dict.fromkeys(states))


def window_size(text):
    """--prefetch-window: a size as replay --window takes it, or None for 0."""
    match = re.fullmatch(r"(\d+)([KMG]?)", text.strip(), re.IGNORECASE)
    if not match:
        raise argparse.ArgumentTypeError(f"'{text}': a size in bytes, K, M or G")
    return None if int(match.group(1)) == 0 else match.group(0)


def positive_number(text):
    value = float(text)
    if value <= 0:
        raise argparse.ArgumentTypeError("must be more than 0")
    return value


def build_parser(prog=PROG):
    parser = argparse.ArgumentParser(
        prog=prog, formatter_class=argparse.RawDescriptionHelpFormatter,
        usage="%(prog)s --trace TRACE [options] -- CMD [ARGS...]\n"
              "       %(prog)s --summarize RUNS.csv [--json]",
        description="Time a command's startup in cold, selectively cold, hot, "
                    "prefetched, prefetched-used, concurrent, "
                    "prefetched-merged, concurrent-merged and simulated "
                    "page-cache states.",
        epilog=EXAMPLES)
    parser.add_argument("-V", "--version", action="version",
                        version=f"%(prog)s (pagetrace) {__version__}")
    parser.add_argument("--trace", help="trace of the command's reads (format "
                        "version 1 or 2; its read records say what to make "
                        "cold, hot or prefetch; with access records (trace "
                        "--used) it is also the used trace)")
    parser.add_argument("--used-trace", metavar="FILE", action="append",
                        help="trace recorded with trace --used: which pages "
                        "prefetched-used and concurrent prefetch (default: "
                        "--trace, when it has access records); repeat it "
                        "for several runs of the start-up: the merged states "
                        "prefetch the union of their used pages, the used "
                        "states those of the first")
    parser.add_argument("--fill-varying", metavar="PAGES", type=int, default=256,
                        help="merged list: also the pages between two pages "
                        "used in some --used-trace runs but not in all, when "
                        "at most PAGES apart in a file (default 256; 0: none)")
    parser.add_argument("--prefetch-window", metavar="SIZE", type=window_size,
                        default="1M",
                        help="concurrent-merged: at most SIZE bytes of the "
                        "prefetch queued at a time (replay --window), so that "
                        "the device reads the list in about its order, not "
                        "sorted by sector (default 1M; 0: no limit)")
    parser.add_argument("--merged-preloads", action="store_true",
                        help="merged list: also every page the program read "
                        "ahead itself (readahead(2), MADV_WILLNEED, fadvise "
                        "WILLNEED: cause forced_ra in a trace -x), used or not")
    parser.add_argument("--pack", metavar="PACK",
                        help="the pack (pagetrace pack) that the launched "
                        "states start the command through with pagetrace "
                        "launch")
    parser.add_argument("-n", "--runs", dest="n", type=int, default=10,
                        help="runs per state (default 10)")
    parser.add_argument("--states", type=parse_states, default=None,
                        help=f"comma-separated, from {','.join(STATES)} (default "
                        "all but the merged ones; prefetched-used and "
                        "concurrent only with a trace that has access records)")
    parser.add_argument("-o", "--output", "--csv", dest="csv", metavar="FILE",
                        help="write every run to this CSV")
    parser.add_argument("-j", "--json", action="store_true",
                        help="print the summary and runs as one JSON object")
    parser.add_argument("--timeout", type=positive_number, default=60.0, metavar="S",
                        help="kill a run (its whole process group) after S "
                             "seconds and mark it timeout (default 60)")
    marker = parser.add_mutually_exclusive_group()
    marker.add_argument("--ready-regex", metavar="RE",
                        help="the start ends at the first output line matching RE")
    marker.add_argument("--ready-file", metavar="PATH",
                        help="the start ends when PATH appears (removed before each run)")
    parser.add_argument("--replay", metavar="PATH",
                        help="the replayer (default: replay/replay of the source "
                        "tree, then pagetrace-replay beside this script or on PATH)")
    slow = parser.add_mutually_exclusive_group()
    slow.add_argument("--throttle", metavar="riops=N[,rbps=SIZE]",
                      help="run the command and the replays in a cgroup whose "
                      "blk-throttle limits the reads of the trace's disks to N "
                      "per second (and SIZE bytes per second); root")
    slow.add_argument("--device-profile", metavar="NAME",
                      help="--throttle with the limits of "
                      + ", ".join(throttle.PROFILES) + " (docs/replay.md)")
    parser.add_argument("--summarize", metavar="RUNS_CSV",
                        help="only summarize a CSV written earlier")
    return parser


def split_command(argv):
    """Everything after the first '--' is the command, taken as it is."""
    if "--" in argv:
        cut = argv.index("--")
        return argv[:cut], argv[cut + 1:]
    return argv, []


def main(argv=None, prog=PROG):
    """The command line; `prog` names the tool in messages (`startup-bench`,
    or `pagetrace startup` from the front door)."""
    global PROG
    PROG = prog
    own, command = split_command(sys.argv[1:] if argv is None else argv)
    parser = build_parser(prog)
    args = parser.parse_args(own)
    if args.summarize:
        args.states = list(STATES)
    elif not args.trace or not command:
        parser.error("give --trace TRACE and, after --, the command to time")
    elif args.n < 1:
        parser.error("-n must be at least 1")
    if args.fill_varying < 0:
        parser.error("--fill-varying must be 0 or more pages")
    if args.ready_regex:
        try:
            re.compile(args.ready_regex)
        except re.error as exc:
            parser.error(f"--ready-regex: {exc}")
    try:
        args.limits = (throttle.profile_limits(args.device_profile) if args.device_profile
                       else throttle.parse_limits(args.throttle) if args.throttle else None)
    except throttle.ThrottleError as exc:
        print(f"{prog}: {exc}", file=sys.stderr)
        return 2
    args.throttled = None
    try:
        return bench(args, command)
    except throttle.ThrottleError as exc:
        print(f"{prog}: {exc}", file=sys.stderr)
        return 1
    except (tracefile.TraceError, packfile.PackError, NothingToDo) as exc:
        print(f"{prog}: {exc}", file=sys.stderr)
        return 1
    except BenchError as exc:
        print(f"{prog}: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        progress("interrupted; the runs so far are in the CSV")
        return 130


def throttle_note(throttled, runs):
    """The device line of the summary: the profile the runs were made on."""
    if throttled:
        limits = throttle.Limits(throttled["riops"], throttled["rbps"], throttled["profile"])
        return (f"device: {throttle.describe(limits)}, blk-throttle on "
                f"{' '.join(throttled['devices'])} (cgroup {throttled['cgroup']})")
    labels = sorted({r.throttle for r in runs if r.throttle})
    return f"device: throttled as {', '.join(labels)}" if labels else \
        "device: not throttled (the machine's own storage)"


def bench(args, command):
    extra = {}
    if args.summarize:
        runs = read_runs_csv(args.summarize)
        refused = {}
    else:
        runs, refused, governor, run_as, replay, method = run_session(
            args, command, cache)
        extra = {"governor": governor, "cache_method": method, "replay": replay,
                 "run_as_uid": run_as.uid if run_as else os.geteuid(),
                 "refused": refused, "throttle": args.throttled}
    summary = summarize(runs)
    compared = comparisons(summary)
    compared["prefetch_gains"] = prefetch_gains(runs)
    compared["best_prefetch_state"] = best_prefetch_state(compared["prefetch_gains"])
    if args.json:
        json.dump(summary_document(args, command, runs, summary, compared, extra),
                  sys.stdout, indent=1)
        sys.stdout.write("\n")
    else:
        notes = [f"state {s} refused: {why}" for s, why in refused.items()]
        notes.append(throttle_note(args.throttled, runs))
        if "governor" in extra:
            notes.append(f"cpu0 frequency governor: {extra['governor']}"
                         if extra["governor"] else "cpu frequency governor: not exposed "
                         "(no cpufreq; a VM or a fixed frequency)")
        print_summary(summary, compared, notes, sys.stdout)
    failed = any(r.status != "ok" for r in runs)
    return 1 if failed or refused else 0


if __name__ == "__main__":
    sys.exit(main())
