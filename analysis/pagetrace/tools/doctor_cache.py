"""`pagetrace doctor`'s check of the cache tools (tools/doctor.py):
cachestat --cgroup CG -j INTERVAL 1 and cachetop --cgroup CG -j INTERVAL 1,
the reader alone in the fresh cgroup CG: it preads the scratch file cold
(mincore: none cached before, all after), then again warm. misses must be
the pages read cold, hits the pages read warm (each pread asks for every
page once), mapped and dirties 0; cachestat's cached/buffers within 64 MiB
of /proc/meminfo; cachestat(2) (syscall 451) where the kernel has it must
count the same cached pages as mincore. Standard library only."""
import calendar
import json
import os
import sys
import time

from pagetrace.tools.doctor_kit import PAGES, Reader, Tool, cached_pages, evict, \
    start_failure, syscall_cachestat

MEMINFO_SLACK_MB = 64


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


def check_cache_tools(report, binaries, path, timeout, interval):
    """Both tools in one round; one that became ready so much before the
    other that its interval ended before the reads is run again alone."""
    late = cache_round(report, binaries, path, time.monotonic() + timeout, interval,
                       retry=True)
    for name in late:
        cache_round(report, {name: binaries[name]}, path, time.monotonic() + timeout,
                    interval, retry=False)


def cache_round(report, binaries, path, deadline, interval, retry):
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
            tools[name] = Tool([binary, "--cgroup", cgroup, "-j", f"{interval:g}", "1"])
        started = {n: t.wait_ready(deadline) for n, t in tools.items()}
        rnd.read(path, reader)
        # The reader exits after the interval: its exit touches pages too.
        results = {n: (started[n], t.finish(max(0.5, deadline - time.monotonic()) + interval + 1))
                   for n, t in tools.items()}
    finally:
        reader.close()
        for t in tools.values():
            if t.proc.poll() is None:
                t.proc.kill()
                t.proc.wait()
        os.rmdir(cgroup)
    late = [n for n, (ready, _) in results.items()
            if ready and rnd.reads_done > tools[n].ready_at + interval - 0.05]
    for name, (ready, text) in results.items():
        if not (retry and name in late):
            judge_cache_tool(report, name, tools[name], ready, text, rnd, interval)
    return late if retry else []


def judge_cache_tool(report, name, tool, ready, text, rnd, interval):
    """One line per column of a cache tool's interval."""
    ground = rnd.why_no_ground()
    if not ready:
        return start_failure(report, name, tool)
    if ground:
        return report.refuse_all(name, ground)
    if rnd.reads_done > tool.ready_at + interval - 0.05:
        return report.refuse_all(name, f"its {interval} s interval ended before the "
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


