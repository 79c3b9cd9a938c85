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
  cachestat --cgroup CG -j 1 1 and cachetop --cgroup CG -j 1 1, the reader
      alone in the fresh cgroup CG: it preads the file cold (mincore: none
      cached before, all after), then again warm. misses must be the pages
      read cold, hits the pages read warm (each pread asks for every page
      once), mapped and dirties 0; cachestat's cached/buffers within 64 MiB
      of /proc/meminfo; cachestat(2) (syscall 451) where the kernel has it
      must count the same cached pages as mincore.

One line per tool and column: `vouched` or `refused: WHY`. Exit 0 only if
every line printed is vouched; 1 otherwise; 2 if there is nothing to check
with (no scratch file), and then nothing is vouched.
"""
import argparse
import calendar
import json
import os
import select
import shutil
import subprocess
import sys
import tempfile
import time

from pagetrace import __version__
from pagetrace.core.c_tools import find_c_tool
from pagetrace.tools import pagecache

PAGE = os.sysconf("SC_PAGE_SIZE")
PAGES = 64
MEMINFO_SLACK_MB = 64
TOOL_TIMEOUT = 4.0     # seconds a tool may take to load (--timeout)
INTERVAL = 0.5         # the cache tools' interval (--interval)

# The reader: told by one line on stdin what to do, answers one line each.
READER = r"""
import os, sys
fd = os.open(sys.argv[1], os.O_RDONLY)
size = os.fstat(fd).st_size
print("ready", flush=True)
for line in sys.stdin:
    what = line.strip()
    if what == "willneed":
        os.posix_fadvise(fd, 0, size, os.POSIX_FADV_WILLNEED)
    if what == "warm":
        os.pread(os.open(sys.executable, os.O_RDONLY), 4096, 0)
    if what in ("willneed", "read"):
        done = 0
        while done < size:
            done += len(os.pread(fd, size - done, done))
    print("done", flush=True)
    if what == "exit":
        break
"""


class CantCheck(Exception):
    """Nothing can be vouched for: why."""


def cached_pages(path):
    """The set of the file's page indexes in the page cache (mincore)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        vec = pagecache.mincore_vector(fd, os.fstat(fd).st_size)
    finally:
        os.close(fd)
    return {i for i, b in enumerate(vec) if b}


def syscall_cachestat(path):
    """cachestat(2)'s count of the file's cached pages, or None without it."""
    if not pagecache.cachestat_available():
        return None
    fd = os.open(path, os.O_RDONLY)
    try:
        return pagecache.cachestat(fd).cached
    finally:
        os.close(fd)


def evict(path):
    """`pagetrace cache evict` of the scratch file; mincore must agree."""
    fd = os.open(path, os.O_RDONLY)
    try:
        result = pagecache.evict_fd(fd, path, pagecache.METHOD_MINCORE)
    finally:
        os.close(fd)
    left = cached_pages(path)
    if result["status"] != "evicted" or left:
        raise CantCheck(f"{len(left)} pages of the scratch file stay cached "
                        f"after eviction ({result['status']})")


def sectors_read(dev):
    """Sectors read so far on device DEV (st_dev), from /proc/diskstats."""
    major, minor = os.major(dev), os.minor(dev)
    with open("/proc/diskstats") as f:
        for line in f:
            fields = line.split()
            if int(fields[0]) == major and int(fields[1]) == minor:
                return int(fields[5])
    return None


def make_scratch(parent):
    """A directory and a file of PAGES pages on a disk file system."""
    try:
        d = tempfile.mkdtemp(prefix="pagetrace-doctor.", dir=parent)
    except OSError as e:
        raise CantCheck(f"cannot make a scratch directory in {parent}: "
                        f"{e.strerror}") from None
    path = os.path.join(d, "scratch")
    try:
        with open(path, "wb") as f:
            f.write(os.urandom(PAGES * PAGE))
            f.flush()
            os.fsync(f.fileno())
    except OSError as e:
        shutil.rmtree(d, ignore_errors=True)
        raise CantCheck(f"cannot write a scratch file in {parent}: "
                        f"{e.strerror}") from None
    if sectors_read(os.stat(path).st_dev) is None:
        shutil.rmtree(d, ignore_errors=True)
        raise CantCheck(f"{parent} is on no block device of /proc/diskstats "
                        "(tmpfs?): pick a disk file system with --dir")
    return d, path


class Reader:
    """The reading process, started idle (its imports done)."""

    def __init__(self, path):
        self.proc = subprocess.Popen([sys.executable, "-S", "-c", READER, path],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     text=True)
        self._expect("ready")
        self.pid = self.proc.pid
        # Its code paths run once before any tool counts them.
        self.do("warm")

    def _expect(self, word):
        line = self.proc.stdout.readline().strip()
        if line != word:
            raise CantCheck(f"the reader said {line!r}, not {word!r}")

    def do(self, what):
        self.proc.stdin.write(what + "\n")
        self.proc.stdin.flush()
        self._expect("done")

    def close(self):
        if self.proc.poll() is None:
            try:
                self.do("exit")
            except (CantCheck, OSError):
                self.proc.kill()
        self.proc.wait()


class Tool:
    """A C tool started in the background; ready once it says so."""

    def __init__(self, argv):
        self.argv = argv
        self.out = tempfile.TemporaryFile(mode="w+")
        self.proc = subprocess.Popen(argv, stdout=self.out, stderr=subprocess.PIPE,
                                     text=True)
        self.err = []
        self.ready_at = None
        self.timed_out = False

    def wait_ready(self, deadline):
        self.timed_out = True
        while time.monotonic() < deadline:
            ready, _, _ = select.select([self.proc.stderr], [], [],
                                        max(0.0, deadline - time.monotonic()))
            if not ready:
                break
            line = self.proc.stderr.readline()
            if not line:
                self.timed_out = False
                break
            self.err.append(line.rstrip("\n"))
            if "Tracing..." in line:
                self.ready_at = time.monotonic()
                return True
        return False

    def finish(self, timeout):
        try:
            self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.proc.terminate()
            self.proc.wait()
        self.err += self.proc.stderr.read().splitlines()
        self.out.seek(0)
        return self.out.read()

    def why_not(self):
        if self.ready_at is None and self.timed_out:
            return "not ready within --timeout (loading its programs took longer)"
        lines = [l for l in self.err if l.strip() and "Tracing..." not in l]
        return lines[-1] if lines else f"exit status {self.proc.returncode}"


class Report:
    def __init__(self):
        self.lines = []

    def say(self, tool, column, why_refused, vouched_how=""):
        verdict = f"refused: {why_refused}" if why_refused else \
            "vouched" + (f" ({vouched_how})" if vouched_how else "")
        self.lines.append(verdict.startswith("vouched"))
        print(f"{tool}: {column}: {verdict}", flush=True)

    def refuse_all(self, tool, why):
        self.say(tool, "all columns", why)


# ----- trace -----

TRACE_COLUMNS = ("timestamp_us", "path", "offset", "pid", "tid", "comm",
                 "cause", "dev", "ino")


def parse_trace(text):
    columns, rows = None, []
    for line in text.splitlines():
        if line.startswith("# columns:"):
            columns = line.split(":", 1)[1].split()
        elif line and not line.startswith("#"):
            rows.append(line.split(" "))
    return columns, rows


def check_trace(report, binary, mode, path, deadline):
    name = f"trace --attach {mode}"
    evict(path)
    st = os.stat(path)
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
            report.refuse_all(name, f"it did not start: {tool.why_not()}{fallback}")
            return
        t0 = time.time()
        sectors0 = sectors_read(st.st_dev)
        reader.do("willneed")
        truth = cached_pages(path)
        sectors = sectors_read(st.st_dev) - sectors0
        t1 = time.time()
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
    mine = [dict(zip(columns, r)) for r in rows if len(r) == len(columns)
            and r[1] == path]
    offsets = [int(r["offset"]) for r in mine]
    pages = {o // PAGE for o in offsets}
    expect = set(range(PAGES))
    if truth != expect:
        report.refuse_all(name, f"mincore shows {len(truth)} of {PAGES} pages "
                          "cached after the read: nothing to compare with")
        return
    say = report.say
    say(name, "path", None if mine else f"no record names {path}",
        f"{len(mine)} records of the scratch file")
    bad = [o for o in offsets if o % PAGE] + sorted(pages - truth)
    missing = sorted(truth - pages)
    dup = len(offsets) - len(pages)
    say(name, "offset", (f"{len(missing)} pages mincore shows cached are missing "
                         f"(first {missing[:3]})" if missing else
                         f"offsets mincore does not show: {bad[:3]}" if bad else
                         f"{dup} pages recorded twice" if dup else None),
        f"page set = mincore, {len(truth)} pages")
    for column, want in (("pid", str(reader.pid)), ("tid", str(reader.pid)),
                         ("comm", "python3"[:15]),
                         ("dev", f"{os.major(st.st_dev)}:{os.minor(st.st_dev)}"),
                         ("ino", str(st.st_ino)), ("cause", "forced_ra")):
        got = sorted({r[column] for r in mine})
        if column == "comm":
            want = os.path.basename(sys.executable)[:15]
        why = None if got == [want] else f"{got[:3]}, not {want}"
        if column == "cause" and got == ["-"]:
            why = ("'-': the kernel lacks the readahead: tracepoints that tell "
                   "the cause (docs/trace-format.md)")
        say(name, column, why, f"{want}")
    stamps = [int(r["timestamp_us"]) for r in mine]
    late = [s for s in stamps if not t0 * 1e6 - 1e4 <= s <= t1 * 1e6 + 1e4]
    say(name, "timestamp_us", f"{len(late)} outside the read's window" if late
        else None, "within the read's window")
    need = len(truth) * PAGE // 512
    say(name, "disk reads", None if sectors is not None and sectors >= need else
        f"/proc/diskstats shows {sectors} sectors read, fewer than {need}",
        f"{sectors} sectors read on the device, >= {need}")


# ----- cachestat, cachetop -----

def make_cgroup():
    """A fresh cgroup at the root of the cgroup2 hierarchy, or None."""
    with open("/proc/self/mounts") as f:
        roots = [line.split()[1] for line in f if line.split()[2] == "cgroup2"]
    if not roots:
        return None
    path = os.path.join(roots[0], f"pagetrace-doctor.{os.getpid()}")
    os.mkdir(path)
    return path


def meminfo_mb():
    vals = {}
    with open("/proc/meminfo") as f:
        for line in f:
            k, v = line.split(":", 1)
            vals[k] = int(v.split()[0]) / 1024
    return vals["Buffers"], vals["Cached"]


class CacheRound:
    """What the kernel says of one cold and one warm read in a cgroup."""

    def __init__(self, reader):
        self.pid = reader.pid
        self.wall0 = time.time()
        self.before = self.cold = self.warm = None
        self.reads_done = self.kernel_count = None

    def read(self, path, reader):
        self.before = cached_pages(path)
        reader.do("read")
        self.cold = cached_pages(path)
        reader.do("read")
        self.warm = cached_pages(path)
        self.reads_done = time.monotonic()
        self.kernel_count = syscall_cachestat(path)

    def why_no_ground(self):
        expect = set(range(PAGES))
        if self.before or self.cold != expect or self.warm != expect:
            return (f"mincore: {len(self.before)} pages cached before the cold read, "
                    f"{len(self.cold)} after it, {len(self.warm)} after the warm one "
                    f"(of {PAGES})")
        if self.kernel_count is not None and self.kernel_count != PAGES:
            return f"cachestat(2) counts {self.kernel_count} cached pages, mincore {PAGES}"
        return None


def check_cache_tools(report, binaries, path, timeout):
    """Both tools in one round; one that became ready so much before the
    other that its interval ended before the reads is run again alone."""
    late = cache_round(report, binaries, path, time.monotonic() + timeout, retry=True)
    for name in late:
        cache_round(report, {name: binaries[name]}, path, time.monotonic() + timeout,
                    retry=False)


def cache_round(report, binaries, path, deadline, retry):
    evict(path)
    cgroup = make_cgroup()
    if cgroup is None:
        for name in binaries:
            report.refuse_all(name, "no cgroup2 hierarchy is mounted")
        return
    reader = Reader(path)
    tools = {}
    try:
        with open(os.path.join(cgroup, "cgroup.procs"), "w") as f:
            f.write(str(reader.pid))
        rnd = CacheRound(reader)
        for name, binary in binaries.items():
            tools[name] = Tool([binary, "--cgroup", cgroup, "-j", f"{INTERVAL:g}", "1"])
        started = {n: t.wait_ready(deadline) for n, t in tools.items()}
        rnd.read(path, reader)
        # The reader exits after the interval: its exit touches pages too.
        results = {n: (started[n], t.finish(max(0.5, deadline - time.monotonic()) + INTERVAL + 1))
                   for n, t in tools.items()}
    finally:
        reader.close()
        for t in tools.values():
            if t.proc.poll() is None:
                t.proc.kill()
                t.proc.wait()
        os.rmdir(cgroup)
    late = [n for n, (ready, _) in results.items()
            if ready and rnd.reads_done > tools[n].ready_at + INTERVAL - 0.05]
    for name, (ready, text) in results.items():
        if not (retry and name in late):
            judge_cache_tool(report, name, tools[name], ready, text, rnd)
    return late if retry else []


def judge_cache_tool(report, name, tool, ready, text, rnd):
    """One line per column of a cache tool's interval."""
    ground = rnd.why_no_ground()
    if not ready:
        return report.refuse_all(name, f"it did not start: {tool.why_not()}")
    if ground:
        return report.refuse_all(name, ground)
    if rnd.reads_done > tool.ready_at + INTERVAL - 0.05:
        return report.refuse_all(name, f"its {INTERVAL} s interval ended before the "
                                 "reads did")
    try:
        row = json.loads(text.splitlines()[-1])
    except (ValueError, IndexError):
        return report.refuse_all(name, f"no JSON line: {tool.why_not()}")
    rows = [("", row)]
    if name.startswith("cachetop"):
        rows = [("processes.", p) for p in row.get("processes", [])]
        judge_processes(report, name, row.get("processes", []), rnd.pid)
    stamp = row.get("time", "")
    try:
        at = calendar.timegm(time.strptime(stamp, "%Y-%m-%dT%H:%M:%SZ"))
    except ValueError:
        at = None
    report.say(name, "time", None if at is not None and rnd.wall0 - 1 <= at <= time.time() + 1
               else f"{stamp!r} is not the interval's end", "the interval's end, UTC")
    how = "cachestat(2) and mincore" if rnd.kernel_count is not None else "mincore"
    expected = {"misses": PAGES, "hits": PAGES, "mapped": 0, "dirties": 0,
                "lost": 0, "read_hit_ratio": 0.5}
    for prefix, r in rows:
        for column, want in expected.items():
            if prefix and column == "lost":
                continue
            got = r.get(column)
            ok = got is not None and abs(got - want) < 1e-6
            report.say(name, prefix + column, None if ok else
                       f"{got}, the kernel says {want}", f"{want}, {how}")
    if name.startswith("cachestat"):
        judge_meminfo(report, name, row)
    return None


def judge_processes(report, name, procs, pid):
    """cachetop's rows: the reader's alone, with its uid and comm."""
    mine = [p for p in procs if p.get("pid") == pid]
    others = [p for p in procs if p.get("pid") != pid]
    report.say(name, "processes.pid", None if mine and not others else
               f"rows for pids {[p.get('pid') for p in procs]}, "
               f"the cgroup held only {pid}", f"{pid}")
    comm = os.path.basename(sys.executable)[:15]
    report.say(name, "processes.uid", None if mine and mine[0].get("uid") == os.getuid()
               else f"{[p.get('uid') for p in mine]}, not {os.getuid()}", f"{os.getuid()}")
    report.say(name, "processes.comm", None if mine and mine[0].get("comm") == comm
               else f"{[p.get('comm') for p in mine]}, not {comm}", comm)


def judge_meminfo(report, name, row):
    buffers, cached = meminfo_mb()
    for column, want in (("buffers_mb", buffers), ("cached_mb", cached)):
        got = row.get(column)
        ok = got is not None and abs(got - want) <= MEMINFO_SLACK_MB
        report.say(name, column, None if ok else
                   f"{got}, /proc/meminfo says {want:.1f}",
                   f"within {MEMINFO_SLACK_MB} MiB of /proc/meminfo")


def main(argv=None, prog="pagetrace doctor"):
    global INTERVAL
    p = argparse.ArgumentParser(prog=prog, description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter,
                                epilog="examples:\n  sudo pagetrace doctor\n"
                                "  sudo pagetrace doctor --dir /srv/tmp --tool trace")
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
    p.add_argument("--tool", action="append", choices=("trace", "cachestat", "cachetop"),
                   help="check only this tool (repeatable; default all three)")
    for t in ("trace", "cachestat", "cachetop"):
        p.add_argument(f"--{t}-binary", metavar="PATH",
                       help=f"the {t} binary to check (default: as `pagetrace {t}` finds it)")
    args = p.parse_args(argv)
    INTERVAL = args.interval
    wanted = args.tool or ["trace", "cachestat", "cachetop"]
    binaries = {}
    for t in wanted:
        binaries[t] = getattr(args, f"{t}_binary") or find_c_tool(t)
        if not binaries[t]:
            sys.stderr.write(f"{prog}: {t}: not found (run make, or make install)\n")
            return 2
    if os.geteuid() != 0:
        sys.stderr.write(f"{prog}: needs root (BPF, cgroups, eviction)\n")
        return 2
    start = time.monotonic()
    try:
        scratch, path = make_scratch(args.dir)
    except CantCheck as e:
        sys.stderr.write(f"{prog}: {e}; nothing checked, nothing vouched\n")
        return 2
    report = Report()
    try:
        for mode in ("tp_btf", "raw_tp"):
            if "trace" in binaries:
                check_trace(report, binaries["trace"], mode, path,
                            time.monotonic() + args.timeout)
        cache = {t: binaries[t] for t in ("cachestat", "cachetop") if t in binaries}
        if cache:
            check_cache_tools(report, {f"{t} --cgroup": b for t, b in cache.items()},
                              path, args.timeout)
    except CantCheck as e:
        report.say("doctor", "scratch file", str(e))
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    sys.stderr.write(f"{prog}: {sum(report.lines)} of {len(report.lines)} vouched "
                     f"in {time.monotonic() - start:.1f} s\n")
    return 0 if report.lines and all(report.lines) else 1


if __name__ == "__main__":
    sys.exit(main())
