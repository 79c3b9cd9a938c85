"""startup-bench: the session, from the trace to the summary: states run
in interleaved order, progress, the throttle, the document --json writes."""
import contextlib
import json
import os
import sys
import tempfile

from pagetrace.tools import diskemu, pagecache as cache, throttle
from pagetrace.core import packfile, tracefile
from pagetrace.core.escape import display_path
from pagetrace.core.startup_csv import (BESIDE_STATES, LAUNCH_STATES, MERGED_STATES, STATES,
                                        USED_STATES, Run, best_prefetch_state,
                                        comparisons, prefetch_gains, summarize)
from pagetrace.tools.startup_bench.output import (RunWriter, _fmt,
                                                  print_summary, read_runs_csv)
from pagetrace.tools.startup_bench.states import (CacheStates, find_replay,
                                                  prepare_and_run, refusals,
                                                  stale_copy)
from pagetrace.tools.startup_bench.supervise import (GOVERNOR, progress,
                                                     NothingToDo,
                                                     ReadinessWatch,
                                                     invoking_user, run_once)
from pagetrace.tools.startup_bench.used_pages import used_pages, used_traces


# ---------------------------------------------------------------------------
# The session.

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
    if args.pack:
        # The cold states make the pack's files cold too: a pack may hold
        # files a warm trace missed, which a launched start would find cached.
        paths = list(dict.fromkeys(paths + [f.path for f in packfile.read(args.pack).files]))
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


def throttle_note(throttled, runs, drive=None):
    """The device line of the summary: the profile the runs were made on."""
    if drive:
        return f"device: emulated spinning disk {drive} (diskemu, docs/diskemu.md)"
    if throttled:
        limits = throttle.Limits(throttled["riops"], throttled["rbps"], throttled["profile"])
        return (f"device: {throttle.describe(limits)}, blk-throttle on "
                f"{' '.join(throttled['devices'])} (cgroup {throttled['cgroup']})")
    labels = sorted({r.throttle for r in runs if r.throttle})
    return f"device: throttled as {', '.join(labels)}" if labels else \
        "device: not throttled (the machine's own storage)"


def bench_on_emulated_disk(args, command):
    """The whole session on diskemu's drive (docs/diskemu.md): the trace's
    files come from the emulated disk under their file system, mounted in
    this process's own namespace, for the command and the replays alike."""
    trace = tracefile.read(args.trace)
    paths = list(tracefile.pages_by_file(trace)[0])
    if not paths:
        raise NothingToDo(f"{args.trace}: no read records")
    with diskemu.emulated_under(paths[0], args.drive):
        return bench(args, command)


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
                 "refused": refused, "throttle": args.throttled,
                 "emulated_disk": getattr(args, "drive", None)}
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
        notes.append(throttle_note(args.throttled, runs, getattr(args, "drive", None)))
        if "governor" in extra:
            notes.append(f"cpu0 frequency governor: {extra['governor']}"
                         if extra["governor"] else "cpu frequency governor: not exposed "
                         "(no cpufreq; a VM or a fixed frequency)")
        print_summary(summary, compared, notes, sys.stdout)
    failed = any(r.status != "ok" for r in runs)
    return 1 if failed or refused else 0
