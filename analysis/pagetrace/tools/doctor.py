"""`pagetrace doctor`: which numbers the C tools can vouch for on the
running kernel (their --self-check). Standard library only; needs root.

It makes a scratch file on a disk file system (not tmpfs), evicts it
(fsync, posix_fadvise DONTNEED, then mincore must show no page cached) and
has a reader process read it cold through each tool:

  trace --attach tp_btf and --attach raw_tp, -x -p READER: the reader
      posix_fadvise(WILLNEED)s the whole file and preads it. Every column
      is compared with the kernel: the page set and offsets with mincore
      after the read (before it: none), pid/tid/comm with the reader's,
      dev/ino with stat(2), timestamps with the run's window, cause with
      forced_ra (what WILLNEED reads are), and the pages' sectors with
      /proc/diskstats' sectors read on the file's device (at least as many).
  cachestat --cgroup and cachetop --cgroup (tools/doctor_cache.py): the
      reader alone in a fresh cgroup, the file read cold and again warm.

One line per tool and column: `vouched`, `not available on this kernel:
WHY` (the kernel lacks what it needs, and its BTF agrees: trace's cause
column before the readahead: tracepoints, a cache tool before
filemap_get_pages; nothing is vouched for) or `refused: WHY` (a wrong
number, a tool that does not load where it should, a check not made).
Exit 0 when nothing is refused and something is vouched (--strict: and
nothing is not available); 1 otherwise; 2 if there is nothing to check with
(not root, no tool, no scratch file), and then nothing is vouched.
"""
import argparse
import os
import shutil
import sys
import tempfile
import time

from pagetrace import __version__
from pagetrace.core.c_tools import find_c_tool
from pagetrace.tools import doctor_kit
from pagetrace.tools.doctor_cache import check_cache_tools
from pagetrace.tools.doctor_kit import PAGE, PAGES, CantCheck, Reader, Report, Tool, \
    cached_pages, evict, make_scratch, sectors_read, start_failure

TOOL_TIMEOUT = 4.0     # seconds a tool may take to load (--timeout)
INTERVAL = 0.5         # the cache tools' interval (--interval)
TOOLS = ("trace", "cachestat", "cachetop")

# ----- trace -----

TRACE_COLUMNS = ("timestamp_us", "path", "offset", "pid", "tid", "comm",
                 "cause", "dev", "ino")
# The cause column's tracepoints (tracer/trace_load.c: TP_CAUSE, all or
# nothing); without one of them, trace prints '-' there.
CAUSE_TRACEPOINTS = ("page_cache_sync_ra", "page_cache_async_ra",
                     "page_cache_ra_unbounded", "page_cache_ra_order")


def parse_trace(text):
    columns, rows = None, []
    for line in text.splitlines():
        if line.startswith("# columns:"):
            columns = line.split(":", 1)[1].split()
        elif line and not line.startswith("#"):
            rows.append(line.split(" "))
    return columns, rows


class TraceRun:
    """What the kernel says of the reader's cold read under trace."""

    def __init__(self, path):
        self.path = path
        self.st = os.stat(path)
        self.truth = self.sectors = None
        self.t0 = self.t1 = None

    def read(self, reader):
        self.t0 = time.time()
        sectors0 = sectors_read(self.st.st_dev)
        reader.do("willneed")
        self.truth = cached_pages(self.path)
        self.sectors = sectors_read(self.st.st_dev) - sectors0
        self.t1 = time.time()


def check_trace(report, binary, mode, path, deadline):
    name = f"trace --attach {mode}"
    evict(path)
    run = TraceRun(path)
    reader = Reader(path)
    out = tempfile.NamedTemporaryFile(prefix="pagetrace-doctor.", suffix=".log")
    try:
        tool = Tool([binary, "--attach", mode, "-x", "-q", "-p", str(reader.pid),
                     "-o", out.name])
        if not tool.wait_ready(deadline):
            reader.close()
            tool.finish(1)
            fallback = ("; trace's default (--attach auto) falls back to raw_tp, "
                        "checked next" if mode == "tp_btf" else "")
            start_failure(report, name, tool, fallback)
            return
        run.read(reader)
        reader.close()
        tool.finish(max(0.5, deadline - time.monotonic()))
        with open(out.name) as f:
            columns, rows = parse_trace(f.read())
    finally:
        reader.close()
        out.close()
    if tool.proc.returncode != 0 or columns != list(TRACE_COLUMNS):
        report.refuse_all(name, f"its output is not a trace -x: {tool.why_not()}")
        return
    if run.truth != set(range(PAGES)):
        report.refuse_all(name, f"mincore shows {len(run.truth)} of {PAGES} pages "
                          "cached after the read: nothing to compare with")
        return
    mine = [dict(zip(columns, r)) for r in rows if len(r) == len(columns)
            and r[1] == path]
    judge_trace(report, name, mine, run, reader.pid)


def judge_trace(report, name, mine, run, pid):
    """One line per column of trace's records of the scratch file."""
    say, truth, st = report.say, run.truth, run.st
    offsets = [int(r["offset"]) for r in mine]
    pages = {o // PAGE for o in offsets}
    say(name, "path", None if mine else f"no record names {run.path}",
        f"{len(mine)} records of the scratch file")
    bad = [o for o in offsets if o % PAGE] + sorted(pages - truth)
    missing = sorted(truth - pages)
    dup = len(offsets) - len(pages)
    say(name, "offset", (f"{len(missing)} pages mincore shows cached are missing "
                         f"(first {missing[:3]})" if missing else
                         f"offsets mincore does not show: {bad[:3]}" if bad else
                         f"{dup} pages recorded twice" if dup else None),
        f"page set = mincore, {len(truth)} pages")
    for column, want in (("pid", str(pid)), ("tid", str(pid)),
                         ("comm", os.path.basename(sys.executable)[:15]),
                         ("dev", f"{os.major(st.st_dev)}:{os.minor(st.st_dev)}"),
                         ("ino", str(st.st_ino)), ("cause", "forced_ra")):
        got = sorted({r[column] for r in mine})
        if column == "cause" and got == ["-"]:
            judge_no_cause(report, name)
            continue
        say(name, column, None if got == [want] else f"{got[:3]}, not {want}", want)
    stamps = [int(r["timestamp_us"]) for r in mine]
    late = [s for s in stamps if not run.t0 * 1e6 - 1e4 <= s <= run.t1 * 1e6 + 1e4]
    say(name, "timestamp_us", f"{len(late)} outside the read's window" if late
        else None, "within the read's window")
    need = len(truth) * PAGE // 512
    say(name, "disk reads", None if run.sectors is not None and run.sectors >= need
        else f"/proc/diskstats shows {run.sectors} sectors read, fewer than {need}",
        f"{run.sectors} sectors read on the device, >= {need}")


def judge_no_cause(report, name, btf=doctor_kit.KERNEL_BTF):
    """trace's '-' for the cause: not available where the kernel's BTF
    lacks one of the readahead: tracepoints, refused where it has them all."""
    missing = doctor_kit.missing_tracepoints(CAUSE_TRACEPOINTS, btf)
    if missing:
        report.unavailable(name, "cause", "the kernel lacks "
                           + ", ".join(f"readahead:{t}" for t in missing)
                           + ", which tell it (trace prints '-': docs/trace-format.md)")
    elif missing is None:
        report.say(name, "cause", f"'-', and the kernel's BTF ({btf}) "
                   "cannot be read to tell whether it lacks the readahead: tracepoints")
    else:
        report.say(name, "cause", "'-', though the kernel has the readahead: "
                   "tracepoints that tell it")


# ----- the command line -----

EPILOG = """\
exit status:
  0  every number printed is right: what this kernel cannot give is listed
     as "not available on this kernel" (--strict: nothing may be)
  1  a tool printed a wrong number, did not load where the kernel has what
     it needs, or a check could not be made
  2  nothing could be checked (not root, a tool not built, no scratch file)

examples:
  sudo pagetrace doctor
  sudo pagetrace doctor --dir /srv/tmp --tool trace
  sudo pagetrace doctor --json > doctor.json
  sudo pagetrace doctor --strict         # every column vouched, or exit 1
"""


def parse_args(argv, prog):
    p = argparse.ArgumentParser(prog=prog, description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter,
                                epilog=EPILOG)
    p.add_argument("-V", "--version", action="version",
                   version=f"%(prog)s (pagetrace) {__version__}")
    p.add_argument("--dir", default="/var/tmp",
                   help="where to make the scratch file: a disk file system "
                   "(default /var/tmp)")
    p.add_argument("--timeout", type=float, default=TOOL_TIMEOUT, metavar="SECONDS",
                   help="how long a tool may take to load (default %(default)s; "
                   "minutes under an emulator)")
    p.add_argument("--interval", type=float, default=INTERVAL, metavar="SECONDS",
                   help="the cache tools' interval (default %(default)s)")
    p.add_argument("--tool", action="append", choices=TOOLS,
                   help="check only this tool (repeatable; default all three)")
    p.add_argument("--strict", action="store_true",
                   help="exit 1 unless every column is vouched: a column this "
                   "kernel cannot give fails too")
    p.add_argument("--json", action="store_true",
                   help="one JSON document on stdout instead of the lines: "
                   "each verdict, the counts and the exit status")
    for t in TOOLS:
        p.add_argument(f"--{t}-binary", metavar="PATH",
                       help=f"the {t} binary to check (default: as `pagetrace {t}` finds it)")
    return p.parse_args(argv)


def cannot_check(prog, args, report, why, start):
    sys.stderr.write(f"{prog}: {why}\n")
    if args.json:
        report.write_json(sys.stdout, args.strict, time.monotonic() - start, error=why)
    return 2


def run_checks(report, binaries, path, args):
    for mode in ("tp_btf", "raw_tp"):
        if "trace" in binaries:
            check_trace(report, binaries["trace"], mode, path,
                        time.monotonic() + args.timeout)
    cache = {t: binaries[t] for t in ("cachestat", "cachetop") if t in binaries}
    if cache:
        check_cache_tools(report, {f"{t} --cgroup": b for t, b in cache.items()},
                          path, args.timeout, args.interval)


def summary(report, status, strict):
    """The counts, and what the exit status says."""
    vouched, na, refused = (report.count(v) for v in (
        doctor_kit.VOUCHED, doctor_kit.UNAVAILABLE, doctor_kit.REFUSED))
    why = ("every number printed is right" if status == 0 else
           "a tool printed a wrong number, or did not load, or a check failed" if refused
           else "nothing vouched" if not vouched else
           "--strict, and not every column is available on this kernel")
    return f"{vouched} vouched, {na} not available on this kernel, {refused} refused: {why}"


def main(argv=None, prog="pagetrace doctor"):
    args = parse_args(argv, prog)
    start = time.monotonic()
    report = Report(as_json=args.json)
    binaries = {t: getattr(args, f"{t}_binary") or find_c_tool(t)
                for t in args.tool or TOOLS}
    for t, binary in binaries.items():
        if not binary:
            return cannot_check(prog, args, report,
                                f"{t}: not found (run make, or make install)", start)
    if os.geteuid() != 0:
        return cannot_check(prog, args, report,
                            "needs root (BPF, cgroups, eviction)", start)
    try:
        scratch, path = make_scratch(args.dir)
    except CantCheck as e:
        return cannot_check(prog, args, report,
                            f"{e}; nothing checked, nothing vouched", start)
    try:
        run_checks(report, binaries, path, args)
    except CantCheck as e:
        report.say("doctor", "scratch file", str(e))
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    status = report.exit_status(args.strict)
    sys.stderr.write(f"{prog}: {summary(report, status, args.strict)} in "
                     f"{time.monotonic() - start:.1f} s\n")
    if args.json:
        report.write_json(sys.stdout, args.strict, time.monotonic() - start)
    return status


if __name__ == "__main__":
    sys.exit(main())
