"""startup-bench's command line: options, examples and `main`."""
import argparse
import re
import sys

from pagetrace import __version__
from pagetrace.tools import diskemu, throttle
from pagetrace.core import packfile, tracefile
from pagetrace.core.startup_csv import STATES
from pagetrace.tools.startup_bench import supervise
from pagetrace.tools.startup_bench.session import bench, bench_on_emulated_disk
from pagetrace.tools.startup_bench.supervise import (BenchError, NothingToDo,
                                                     progress)


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
  sudo startup-bench --trace reads.log -n 5 --device-profile hdd-7200 \\
      -- app ...                           # on an emulated 7,200 rpm disk
                                           # (the files on a loop-mounted image)
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


def build_parser(prog=supervise.PROG):
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
    parser.add_argument("--pack", metavar="PACK",
                        help="the pack (pagetrace pack) that the launched "
                        "states start the command through with pagetrace "
                        "launch")
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
                      + ", ".join(throttle.PROFILES) + " (docs/replay.md); or an "
                      "emulated spinning disk (hdd-7200, hdd-5400: diskemu, "
                      "docs/diskemu.md) under the trace's files, which must be "
                      "on a loop-mounted image")
    parser.add_argument("--summarize", metavar="RUNS_CSV",
                        help="only summarize a CSV written earlier")
    return parser


def split_command(argv):
    """Everything after the first '--' is the command, taken as it is."""
    if "--" in argv:
        cut = argv.index("--")
        return argv[:cut], argv[cut + 1:]
    return argv, []


def main(argv=None, prog=supervise.PROG):
    """The command line; `prog` names the tool in messages (`startup-bench`,
    or `pagetrace startup` from the front door)."""
    # progress() names the tool as it was called.
    supervise.PROG = prog
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
    args.drive = None
    if args.device_profile and diskemu.is_profile(args.device_profile):
        args.drive, args.device_profile = args.device_profile, None
    try:
        args.limits = (throttle.profile_limits(args.device_profile) if args.device_profile
                       else throttle.parse_limits(args.throttle) if args.throttle else None)
    except throttle.ThrottleError as exc:
        print(f"{prog}: {exc}", file=sys.stderr)
        return 2
    args.throttled = None
    try:
        if args.drive:
            return bench_on_emulated_disk(args, command)
        return bench(args, command)
    except diskemu.DiskEmuError as exc:
        print(f"{prog}: --device-profile {args.drive}: {exc}", file=sys.stderr)
        return 1
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


if __name__ == "__main__":
    sys.exit(main())
