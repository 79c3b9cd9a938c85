"""startup-bench: the cache states (cold, selective, hot, prefetched, ...,
simulated): what each refuses, how each is prepared, and the run in it."""
import contextlib
import os
import shutil
import subprocess
import sys
import threading
import time

from pagetrace.core import packfile
from pagetrace.core.c_tools import TREE_TOP, find_c_tool
from pagetrace.core.escape import display_path
from pagetrace.core.startup_csv import (BESIDE_STATES, LAUNCH_STATES, MERGED_STATES,
                                        USED_STATES)
from pagetrace.tools.startup_bench.supervise import (DROP_CACHES, BenchError,
                                                     progress)


# ---------------------------------------------------------------------------
# Cache states.

def find_launcher():
    """argv of `pagetrace launch` as users deploy it: the C launcher
    (launch/launch of the source tree, or pagetrace-launch), so that its
    own start, not a Python interpreter's, is what the launched states
    time; else the `pagetrace` front door."""
    launcher = find_c_tool("launch")
    if launcher:
        return [launcher]
    for candidate in (os.path.join(TREE_TOP, "scripts", "pagetrace"),
                      os.path.join(os.path.dirname(os.path.realpath(
                          sys.argv[0] or ".")), "pagetrace")):
        if os.path.isfile(candidate):
            return [sys.executable, "-I", "-S", candidate, "launch"]
    return [shutil.which("pagetrace") or "pagetrace", "launch"]


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
                       ("simulated", "replay --first-reads (O_DIRECT, original order)")):
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
    """Puts the page cache in each state, with pagetrace.tools.pagecache."""

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
        return [*find_launcher(), "-q",
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
        # Each page once: a page the traced start read twice (reclaimed
        # in between, by DAMON here) is not a cost of a cold start, and
        # replaying it twice made the simulation +36% on the emulated
        # disk (docs/lab/case-study-firefox.md).
        prefetch_s, error = caches.run_replay("--first-reads")
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
