"""`pagetrace pack`: record a command's start-up N times with `trace
--used` and compile the pages it used into a pack (docs/pack-format.md),
or compile a pack from `trace --used` traces recorded before.

By default the runs are recorded with the disks' read_ahead_kb at 0
(docs/lab/case-study-firefox.md, sessions B and C: with readahead off every
page a start touches faults, so the access records are the pages it
touched, not fault-around's guesses; the prefetch of that list recovered
74-106% of the I/O cost against 63-72% for a list recorded with readahead
on). The setting is restored on every exit path Python sees (normal end,
error, SIGINT, SIGTERM, SIGHUP); only SIGKILL can leave it at 0. The
journal file in /run, locked while a recording runs, holds the old values:
the next recording puts back a killed one's before it reads them, and
`pagetrace pack --restore-read-ahead` does so alone. Recordings take
turns on the lock. Standard library only: it runs under sudo on the system Python.
"""
import argparse
import contextlib
import fcntl
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time

from pagetrace import __version__
from pagetrace.core import packfile, process, tracefile
from pagetrace.core.c_tools import find_c_tool
from pagetrace.core.escape import display_path
from pagetrace.core.packfile import pack_name, packs_dir
from pagetrace.tools import packruntime, throttle
from pagetrace.tools.packdevice import request_us, seeking_disks, seeking_metadata
from pagetrace.tools.startup_bench.used_pages import (fill_varying, first_accesses,
                                                      forced_readahead)
from pagetrace.tools.startup_bench.cli import split_command

PROG = "pagetrace pack"
DEFAULT_RUNS = 3
DEFAULT_FILL = 256
DROP_CACHES = "/proc/sys/vm/drop_caches"
READ_AHEAD_JOURNAL = "/run/pagetrace-pack-read-ahead.json"
_SIGNALS = (signal.SIGTERM, signal.SIGHUP)


class PackRecordError(Exception):
    """Stops `pagetrace pack`: one line, exit status 1."""


def progress(message, quiet=False):
    if not quiet:
        print(f"{PROG}: {message}", file=sys.stderr, flush=True)


# ---------------------------------------------------------------------------
# Compiling traces into a pack.

def used_first_accesses(traces, min_runs=1, fill=DEFAULT_FILL, preloads=False):
    """{(path, offset): when} of the pages to prefetch: the read pages with
    an access or map record (startup-bench's first_accesses: each at its earliest
    first access) in at least `min_runs` of the traces; with min_runs 1
    (the union) and several traces, the pages between two varying pages
    at most `fill` pages apart are added too (startup-bench's fill_varying).
    Special paths and metadata records name no file to prefetch."""
    first = first_accesses(traces)
    if min_runs > 1:
        counts = {}
        for trace in traces:
            for key in first_accesses([trace]):
                counts[key] = counts.get(key, 0) + 1
        first = {k: v for k, v in first.items() if counts.get(k, 0) >= min_runs}
    elif fill > 0 and len(traces) > 1:
        first = {**fill_varying(traces, first, fill), **first}
    if preloads:
        # The program's own readahead(2)/WILLNEED reads, used or not: it
        # asks for them at every start, so a cold start reads them.
        first = {**forced_readahead(traces), **first}
    return {k: v for k, v in first.items()
            if not k[0].startswith("//") and not tracefile.is_metadata(k[0])}


def group_ranges(pages, page_size):
    """[(path, first page, pages, ts_us)] from {(path, offset): when}: in
    first-access order, each page joining the last range of its file when
    it follows it in the file."""
    ranges, last = [], {}
    for (path, offset), when in sorted(pages.items(), key=lambda kv: kv[1]):
        page = offset // page_size
        index = last.get(path)
        if index is not None and ranges[index][1] + ranges[index][2] == page:
            p, start, count, ts = ranges[index]
            ranges[index] = (p, start, count + 1, ts)
            continue
        last[path] = len(ranges)
        ranges.append((path, page, 1, max(0, when[0])))
    return ranges


def compile_pack(traces, command, read_ahead_kb, min_runs=1,
                 fill=DEFAULT_FILL, warn=print, preloads=False):
    """The Pack of `traces` (tracefile.Trace with access records); files
    that cannot be opened now are left out, each with a warning."""
    page_size = traces[0].header.page_size
    pages = used_first_accesses(traces, min_runs, fill, preloads)
    files, kept = _files_and_ranges(group_ranges(pages, page_size), warn)
    measured = request_us(files)
    metadata = seeking_metadata(traces, measured)
    if metadata:
        files, kept = _files_and_ranges(group_ranges({**pages, **metadata}, page_size),
                                        warn=lambda m: None)
    return packfile.Pack(packfile.FORMAT_VERSION, page_size, int(time.time()),
                         command, len(traces), read_ahead_kb, files, kept, measured)


def _files_and_ranges(ranges, warn):
    """([PackFile], [PackRange]) of grouped ranges: each file identified
    now; one that cannot be opened is left out, with a warning."""
    files, index = [], {}
    for path, *_ in ranges:
        if path in index:
            continue
        try:
            files.append(packfile.identify(path))
            index[path] = len(files) - 1
        except OSError as err:
            index[path] = None
            warn(f"{display_path(path)}: left out of the pack: {err.strerror}")
    kept = [packfile.PackRange(index[p], page, count, ts)
            for p, page, count, ts in ranges if index[p] is not None]
    return files, kept


def read_used_traces(paths):
    traces = []
    for path in paths:
        trace = tracefile.read(path)
        if not any(r.kind in ("access", "map") for r in trace.records):
            raise PackRecordError(
                f"{display_path(path)}: no access records (format version "
                f"{trace.header.version}): record it with trace --used")
        traces.append(trace)
    return traces


# ---------------------------------------------------------------------------
# Recording: read_ahead_kb off, restored on every exit path.

def _interrupt(signum, frame):
    raise KeyboardInterrupt(f"signal {signum}")


def read_ahead_file(disk, sysfs="/sys"):
    """The read_ahead_kb file of whole disk DISK (a dev_t)."""
    return f"{sysfs}/dev/block/{throttle.dev_text(disk)}/queue/read_ahead_kb"


def read_ahead_files(mountinfo=throttle.MOUNTINFO, sysfs="/sys"):
    """The read_ahead_kb files (/sys/dev/block/MAJ:MIN/queue) of the disks
    under every mounted block filesystem, each once."""
    files = {}
    for mount in throttle.mounts(mountinfo):
        if os.major(mount.dev) == 0:
            continue
        try:
            disk = throttle.whole_disk(mount.dev, mount.point, sysfs)
        except (throttle.ThrottleError, OSError):
            continue
        path = read_ahead_file(disk, sysfs)
        if os.path.exists(path):
            files.setdefault(path, None)
    return list(files)


def _write_text(path, text):
    with open(path, "w") as f:
        f.write(text)


def _locked_journal(journal, blocking=True):
    """The journal, open and flock()ed: its file descriptor, or None when
    another recording holds it and not BLOCKING. The lock is held by the
    recording that set read_ahead_kb, so a journal found unlocked is a
    killed recording's."""
    while True:
        fd = os.open(journal, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                if not blocking:
                    os.close(fd)
                    return None
                progress(f"waiting for another recording to put back read_ahead_kb ({journal})")
                fcntl.flock(fd, fcntl.LOCK_EX)
            if os.fstat(fd).st_ino == os.stat(journal).st_ino:
                return fd
        except FileNotFoundError:
            pass    # unlinked by the holder that ended: open the path again
        os.close(fd)


def _put_back(fd, journal):
    """Writes back the values the journal (open at FD, locked) holds, and
    empties it. Returns the files written."""
    text = os.pread(fd, 1 << 20, 0)
    saved = json.loads(text) if text.strip() else {}
    for path, value in saved.items():
        with contextlib.suppress(OSError):
            _write_text(path, f"{value}\n")
    os.ftruncate(fd, 0)
    return list(saved)


def restore_read_ahead(journal=READ_AHEAD_JOURNAL):
    """Puts back the read_ahead_kb values of a recording that was killed
    (the journal), and removes the journal. Returns the files restored;
    PackRecordError while a recording is running."""
    if not os.path.exists(journal):
        return []
    fd = _locked_journal(journal, blocking=False)
    if fd is None:
        raise PackRecordError(f"{journal}: a recording is running; it puts "
                              "read_ahead_kb back when it ends")
    try:
        return _put_back(fd, journal)
    finally:
        _unlink_and_close(fd, journal)


def _unlink_and_close(fd, journal):
    """Removes the journal while its lock is held, then lets the lock go."""
    with contextlib.suppress(OSError):
        os.unlink(journal)
    os.close(fd)


@contextlib.contextmanager
def read_ahead_set(kb, files, journal=READ_AHEAD_JOURNAL):
    """read_ahead_kb = kb on `files` inside the `with`; the old values are
    written back when it ends however it ends (SIGTERM and SIGHUP are made
    KeyboardInterrupt meanwhile), and kept in `journal` until then. The
    journal is locked from first to last, so one recording at a time sets
    the values; a killed recording's journal is put back before they are
    read."""
    saved = {}
    old_handlers = {s: signal.signal(s, _interrupt) for s in _SIGNALS}
    fd = None
    try:
        fd = _locked_journal(journal)
        _put_back(fd, journal)
        for path in files:
            with open(path) as f:
                saved[path] = f.read().strip()
        os.pwrite(fd, json.dumps(saved).encode(), 0)
        os.fsync(fd)
        for path in files:
            _write_text(path, f"{kb}\n")
        yield saved
    finally:
        if fd is not None:
            _put_back(fd, journal)
            _unlink_and_close(fd, journal)
        for sig, handler in old_handlers.items():
            signal.signal(sig, handler)


TRACE_LOST = packruntime.TRACE_LOST
# Times a run whose trace lost events is recorded again before the pack
# gives up (a lost event is a page the list may miss, said on trace's
# LOST line; seen on 6.18 recording chromium, 2026-11-27: one run of three
# said `faults unresolved: 1`).
LOST_RETRIES = 2


def record_runs(command, runs, workdir, tracer, quiet=False, target=(),
                daemons=packruntime.DEFAULT_DAEMONS):
    """Runs `trace --used -x` on `command` `runs` times, each from a cold
    page cache (sync; drop_caches), and returns the trace paths; with
    `target` (trace's --cgroup or --container options), that target, the
    starter `command` and the runtime's `daemons` are traced, the run's
    traces merged into one (packruntime.trace_run()). A run whose trace
    lost events (trace's LOST line is on stderr) is recorded again, up to
    LOST_RETRIES times."""
    paths = []
    for number in range(runs):
        path = os.path.join(workdir, f"run-{number + 1}.log")
        for attempt in range(LOST_RETRIES + 1):
            os.sync()
            _write_text(DROP_CACHES, "3\n")
            started = time.perf_counter()
            argv = [tracer, "--used", "-x", "-q"]
            if target:
                returncode = _trace_target(argv, target, command, path, daemons)
            else:
                returncode = subprocess.run(argv + ["-o", path, "--", *command],
                                            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                            preexec_fn=process.with_parent()).returncode
            if returncode != TRACE_LOST or attempt == LOST_RETRIES:
                break
            progress(f"run {number + 1}: the trace lost events (trace's line "
                     "above): recorded again", quiet)
        if returncode != 0:
            raise PackRecordError(
                f"run {number + 1}: trace --used -- {display_path(command[0])} "
                f"exited with status {returncode} (a run that fails "
                "records no usable start-up"
                + (f"; events lost in {LOST_RETRIES + 1} recordings"
                   if returncode == TRACE_LOST else "") + ")")
        progress(f"run {number + 1}/{runs} recorded in "
                 f"{time.perf_counter() - started:.2f} s: {path}", quiet)
        paths.append(path)
    return paths


def _trace_target(argv, target, command, path, daemons):
    try:
        return packruntime.trace_run(argv, list(target), command, path, daemons)
    except packruntime.TargetError as err:
        raise PackRecordError(str(err)) from None


def recording_refusal():
    if os.geteuid() != 0:
        return ("recording needs root (trace loads BPF programs: CAP_BPF and "
                "CAP_PERFMON; read_ahead_kb and drop_caches are root's): run "
                "it under sudo, or give traces recorded with trace --used as "
                "--from TRACE")
    return None


def record(args, command):
    """The trace paths of args.runs recorded runs (in args.keep_traces, or
    a temporary directory kept in args for the session)."""
    refusal = recording_refusal()
    if refusal:
        raise PackRecordError(refusal)
    if shutil.which(command[0]) is None:
        raise PackRecordError(f"{display_path(command[0])}: command not found")
    tracer = find_c_tool("trace")
    if tracer is None:
        raise PackRecordError("the tracer is missing: neither tracer/trace "
                              "(run make) nor pagetrace-trace (make install)")
    if args.keep_traces:
        os.makedirs(args.keep_traces, exist_ok=True)
        workdir = args.keep_traces
    else:
        args.scratch = tempfile.TemporaryDirectory(prefix="pagetrace-pack-")
        workdir = args.scratch.name
    target = (("--cgroup", args.cgroup) if args.cgroup else
              ("--container", args.container, "--wait") if args.container else ())
    files = read_ahead_files()
    if args.read_ahead_kb == "auto":
        seeking = seeking_disks(files)
        args.read_ahead_kb = "keep" if seeking else 0
        if seeking:
            progress("read_ahead_kb left as it is while recording: "
                     + ", ".join(f"{disk}: a random read took {us} us" for disk, us in seeking)
                     + " (a seek; with 0, every page a start touches would be a "
                     "request of its own)", args.quiet)
    if args.read_ahead_kb == "keep":
        return record_runs(command, args.runs, workdir, tracer, args.quiet, target,
                           args.daemons)
    with read_ahead_set(args.read_ahead_kb, files) as saved:
        progress(f"read_ahead_kb {args.read_ahead_kb} while recording on "
                 + ", ".join(f"{p.split('/')[4]} (was {v})" for p, v in saved.items()),
                 args.quiet)
        return record_runs(command, args.runs, workdir, tracer, args.quiet, target,
                           args.daemons)


# ---------------------------------------------------------------------------
# The command line.

EXAMPLES = """\
examples:
  sudo pagetrace pack -- firefox-esr --headless --screenshot /tmp/s.png about:blank
  sudo pagetrace pack -n 5 -o firefox.pack -- firefox-esr --headless ...
  pagetrace pack --from used1.log --from used2.log -o app.pack
  sudo pagetrace pack --read-ahead-kb keep --keep-traces runs/ -- ./app
  pagetrace launch firefox.pack -- firefox-esr --headless ...
  sudo pagetrace pack --container web -o web.pack -- docker run --rm --name web IMAGE
  pagetrace export web.pack --format nydus-prefetch --root LAYER_DIR -o prefetch.json

The pack goes to -o, else to the packs directory ($PAGETRACE_PACKS, default
/var/lib/pagetrace/packs) as PROGRAM-CRC32.pack, one pack per command line,
which `pagetrace launch NAME -- CMD` finds by that name.

exit status: 0 the pack was written; 1 it was not (a run failed, not root,
a trace without access records, no page to pack); 2 bad usage.
"""


def read_ahead_value(text):
    if text in ("keep", "auto"):
        return text
    if not text.isdigit():
        raise argparse.ArgumentTypeError("a number of KiB, or keep")
    return int(text)


def daemon_names(text):
    names = tuple(n for n in text.split(",") if n)
    if not names:
        raise argparse.ArgumentTypeError("give process names, or none")
    return () if names == ("none",) else names


def positive(text):
    if not text.isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError("must be a whole number of at least 1")
    return int(text)


def build_parser(prog=PROG):
    p = argparse.ArgumentParser(
        prog=prog, formatter_class=argparse.RawDescriptionHelpFormatter,
        usage="%(prog)s [options] -- CMD [ARGS...]\n"
              "       %(prog)s --from TRACE [--from TRACE ...] -o PACK",
        description="Record a command's start-up with trace --used and "
        "compile the pages it used into a prefetch pack for pagetrace "
        "launch (docs/pack-format.md).", epilog=EXAMPLES)
    p.add_argument("-V", "--version", action="version",
                   version=f"%(prog)s (pagetrace) {__version__}")
    p.add_argument("-n", "--runs", type=positive, default=DEFAULT_RUNS,
                   help="runs to record (default %(default)s)")
    p.add_argument("--from", dest="traces", action="append", metavar="TRACE",
                   help="compile these trace --used traces instead of recording")
    p.add_argument("-o", "--output", metavar="PACK",
                   help="the pack (default: PACKS_DIR/PROGRAM-CRC32.pack)")
    p.add_argument("--read-ahead-kb", type=read_ahead_value, default="auto",
                   metavar="KB|keep|auto", help="read_ahead_kb of the disks while "
                   "recording, restored after (0: the list of the pages "
                   "touched; keep: leave it; auto, the default: 0, unless a "
                   "mounted disk seeks (a random read of 2 ms or more), where "
                   "keep: with 0 every page touched is a request of its own)")
    p.add_argument("--min-runs", type=positive, default=1, metavar="K",
                   help="only pages used in at least K runs (default 1: "
                   "every page any run used)")
    p.add_argument("--fill-varying", type=int, default=DEFAULT_FILL,
                   metavar="PAGES", help="with --min-runs 1: also the pages "
                   "between two pages used in some runs but not all, at most "
                   "PAGES apart (default %(default)s; 0: none)")
    p.add_argument("--preloads", action="store_true",
                   help="also the pages the command asked the kernel to read "
                   "ahead itself (readahead(2), WILLNEED; trace cause "
                   "forced_ra), used or not")
    target = p.add_mutually_exclusive_group()
    target.add_argument("--container", metavar="NAME",
                        help="record the container NAME (docker or podman), "
                        "which CMD starts: trace attaches first and waits for it "
                        "(trace --container --wait); each run ends when it exits "
                        "(a CMD that ends without having started it fails the pack). "
                        "CMD and the runtime's daemons (--daemons) are recorded "
                        "too, merged into the run's trace")
    target.add_argument("--cgroup", metavar="PATH",
                        help="record the tasks of cgroup PATH while CMD (say, "
                        "systemctl start) runs; each run ends when CMD has. "
                        "CMD and the runtime's daemons are recorded too")
    p.add_argument("--daemons", type=daemon_names, default=packruntime.DEFAULT_DAEMONS,
                   metavar="NAME[,NAME...]|none", help="with --container or --cgroup: "
                   "the runtime's daemons, traced (trace -p) with what they fork "
                   "while the target starts: the running processes of these "
                   "command or executable names (default: "
                   f"{','.join(packruntime.DEFAULT_DAEMONS)}; none: no daemon)")
    p.add_argument("--keep-traces", metavar="DIR",
                   help="keep the recorded traces in DIR")
    p.add_argument("--restore-read-ahead", action="store_true",
                   help="only put back the read_ahead_kb a killed recording "
                   f"left ({READ_AHEAD_JOURNAL})")
    p.add_argument("-j", "--json", action="store_true",
                   help="print what was packed as JSON")
    p.add_argument("-q", "--quiet", action="store_true")
    return p


def summary(pack, path):
    pages = sum(r.pages for r in pack.ranges)
    return {"pack": path, "runs": pack.runs, "files": len(pack.files),
            "ranges": len(pack.ranges), "pages": pages,
            "bytes": pages * pack.page_size, "read_ahead_kb": pack.read_ahead_kb}


def main(argv=None, prog=PROG):
    global PROG
    PROG = prog
    own, command = split_command(sys.argv[1:] if argv is None else argv)
    parser = build_parser(prog)
    args = parser.parse_args(own)
    if args.restore_read_ahead:
        try:
            restored = restore_read_ahead()
        except (PackRecordError, OSError) as err:
            print(f"{prog}: --restore-read-ahead: {err}", file=sys.stderr)
            return 1
        progress(f"restored {len(restored)} read_ahead_kb setting(s)")
        return 0
    if (args.container or args.cgroup) and (args.traces or not command):
        parser.error("--container and --cgroup record: give, after --, the "
                     "command that starts the target, and no --from")
    if not args.traces and not command:
        parser.error("give, after --, the command to record, or --from TRACE")
    if args.traces and not command and not args.output:
        parser.error("with --from and no command, give -o PACK")
    if args.fill_varying < 0:
        parser.error("--fill-varying must be 0 or more pages")
    try:
        return pack_main(args, command)
    except (PackRecordError, tracefile.TraceError, OSError) as err:
        text = f"{err.filename}: {err.strerror}" if isinstance(err, OSError) and \
            err.filename else str(err)
        print(f"{prog}: {text}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print(f"{prog}: interrupted; read_ahead_kb restored, no pack written",
              file=sys.stderr)
        return 130


def pack_main(args, command):
    if args.traces:
        paths, read_ahead = args.traces, "unknown"
    else:
        paths, read_ahead = record(args, command), args.read_ahead_kb
        if read_ahead == "keep":
            read_ahead = "unchanged"
    traces = read_used_traces(paths)
    for trace in traces:
        for message in trace.warnings():
            progress(f"warning: {message}", args.quiet)
    text = " ".join(command) if command else \
        traces[0].header.keys.get("command", "unknown")
    pack = compile_pack(traces, text, read_ahead, args.min_runs,
                        args.fill_varying,
                        warn=lambda m: progress(f"warning: {m}", args.quiet),
                        preloads=args.preloads)
    if not pack.ranges:
        raise PackRecordError("no used page of a file that exists here: "
                              "nothing to pack")
    output = args.output or os.path.join(packs_dir(), pack_name(command))
    if not args.output:
        os.makedirs(os.path.dirname(output), exist_ok=True)
    packfile.write(pack, output)
    facts = summary(pack, output)
    if args.json:
        json.dump(facts, sys.stdout, indent=1)
        sys.stdout.write("\n")
    else:
        progress(f"{facts['pages']:,} pages ({facts['bytes'] / 2**20:.1f} MiB) "
                 f"of {facts['files']} files in {facts['ranges']:,} ranges, "
                 f"from {pack.runs} run(s): {output}", args.quiet)
    return 0


if __name__ == "__main__":
    sys.exit(main())
