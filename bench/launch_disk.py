#!/usr/bin/env python3
"""A start on one device, states interleaved (issue 43): the application's
files on an image over diskemu's emulated seeking disk (hdd-7200,
hdd-5400), or on the machine's own disk (machine), `pagetrace pack`
recorded there, then per iteration, in a new random order each time:

  cold        sync; drop_caches (files, dentries, inodes, metadata)
  selective   only the files of the cold trace and the pack evicted
  hot         those files read whole first
  launched    cold, then `pagetrace-launch PACK -- CMD` (--mode auto)
  launched-bSIZE-gG[-wW]  (LAUNCH_DISK_EXTRA) the same with --batch
              SIZE --batch-gap G [--window W]
  launched-leadMS  (LAUNCH_DISK_EXTRA) the same with --lead MS (0: CMD
              after the whole sorted read, as before --lead)
  launched-preloads  (LAUNCH_DISK_EXTRA) the same with the pack compiled
              from the same runs with `pack --preloads` (the program's own
              readahead(2)/WILLNEED pages too, used or not)
  launched-target  (LAUNCH_DISK_EXTRA, a container) the same with the
              pack compiled from the runs' container traces alone
              (`run-N.target.log`): the pack as before issue 43's runtime
              reads were recorded
  pack-cached  (LAUNCH_DISK_EXTRA) cold, the pack's pages alone read in
              disk order (untimed, no gaps filled), then the start: the
              launch's ceiling were its prefetch free and always ahead of
              the start; what is left is what the pack lacks
  whole-file  cold, then the trace's files read whole, front to back, by a
              second process started beside CMD (what vmtouch -t,
              ureadahead and systemd-readahead do); timed until CMD ends
  bound       cold, the pack's pages read in disk order by the launch's own
              sorted plan (launch.sorted_prefetch), then every file warmed
              (untimed) and a hot start: read + hot start. No prefetch of
              the pack into the page cache that is paid before the start
              can beat it.

On an emulated disk (bench_launch.py --devices hdd-7200) everything runs
in a private mount namespace (`unshare -m`) in which diskemu serves the
image over its mount point, and each start of the application runs in one
more namespace of its own (work/run-app) in which the image's usr and etc
are overlaid on /usr and /etc, as the firefox case study's starts were:
the application's files come from the emulated disk, the tools' from the
machine's. Interrupted (Ctrl-C, SIGTERM) at any point, the runs' process
groups are killed, diskemu unmounts and detaches (--exit-with-parent),
and the namespaces end with their last process.

Each run's time, the emulated device's read_ahead_kb and the device's read
requests are written to work/runs-DEVICE.csv; the summary to stdout.

USAGE (root; bench_launch.py calls it)
  launch_disk.py inside DEVICE WORK N [--container NAME ROOT_TAR] -- CMD...
  launch_disk.py markdown RUNS.csv      # the states as a markdown table
"""
import glob
import json
import os
import random
import re
import signal
import statistics
import subprocess
import sys
import time

TOP = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(TOP, "analysis"))
from pagetrace.core import packfile, stats, tracefile  # noqa: E402
from pagetrace.core.startup_csv import ratio_ci  # noqa: E402
from pagetrace.tools import diskemu, pagecache  # noqa: E402

# --devices names this module runs (bench_launch.py), and how it says them.
DEVICES = {"hdd-7200": "diskemu hdd-7200 (emulated 7,200 rpm disk)",
           "hdd-5400": "diskemu hdd-5400 (emulated 5,400 rpm disk)",
           "machine": "the machine's disk, every state from drop_caches"}
STATES = ("cold", "selective", "hot", "launched", "whole-file", "bound")
TRACER = os.path.join(TOP, "tracer", "trace")
LAUNCHER = os.path.join(TOP, "launch", "launch")
PAGETRACE = os.path.join(TOP, "scripts", "pagetrace")
# The whole-file prefetch: each file read front to back with read(), the
# kernel's readahead around it, in the order the trace first read them.
WHOLE_FILE = ("import sys\n"
              "buf = bytearray(1 << 20)\n"
              "for path in sys.argv[1:]:\n"
              "    try:\n"
              "        with open(path, 'rb', buffering=0) as f:\n"
              "            while f.readinto(buf):\n"
              "                pass\n"
              "    except OSError:\n"
              "        pass\n")
RUN_TIMEOUT = 300
LEAD = re.compile(r"launched-lead(\d+)$")
BATCHED = re.compile(r"launched-b(\d+[KMG]?)-g(\d+)(?:-w(\d+[KMG]?))?$")
RUN_RECORDED = re.compile(r"run (\d+)/\d+ recorded in ([\d.]+) s")

_groups = set()


def _interrupt(signum, frame):
    raise KeyboardInterrupt(f"signal {signum}")


def kill_groups(grace_s=10.0):
    """SIGTERM to every run's process group (pack puts read_ahead_kb back
    on SIGTERM), then SIGKILL to whatever is left after grace_s."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        for pgid in list(_groups):
            try:
                os.killpg(pgid, sig)
            except ProcessLookupError:
                _groups.discard(pgid)
        end = time.monotonic() + grace_s
        while sig == signal.SIGTERM and _groups and time.monotonic() < end:
            for pgid in list(_groups):
                try:
                    os.killpg(pgid, 0)
                except ProcessLookupError:
                    _groups.discard(pgid)
            time.sleep(0.1)
    _groups.clear()


def spawn(argv, **kw):
    """argv in a process group of its own (killed if the bench is
    interrupted: the launch's prefetching grandchild is in it too)."""
    proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, start_new_session=True,
                            stdout=kw.pop("stdout", subprocess.DEVNULL),
                            stderr=kw.pop("stderr", subprocess.PIPE), **kw)
    _groups.add(proc.pid)
    return proc


def finish(proc, timeout=RUN_TIMEOUT, whole=False):
    """Waits for proc; its exit status and the last line of its stderr
    (whole: all of it)."""
    try:
        _, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        _, err = proc.communicate()
    text = (err or b"").decode("utf-8", "replace").strip()
    return proc.returncode, (text if whole else (text.splitlines() or [""])[-1])


def pagetrace_pack(argv, env):
    """`pagetrace pack ARGV` in a group of its own: (seconds, exit status,
    its stderr)."""
    started = time.perf_counter()
    proc = spawn([sys.executable, PAGETRACE, "pack", *argv], env=env)
    status, err = finish(proc, timeout=3600, whole=True)
    reap(proc)
    return time.perf_counter() - started, status, err


def reap(proc):
    """Whatever is left of proc's group (a prefetch that outlived CMD)."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    _groups.discard(proc.pid)


def drop_caches():
    os.sync()
    with open("/proc/sys/vm/drop_caches", "w") as f:
        f.write("3\n")


class Device:
    """The block device under the application's files: its read_ahead_kb
    and its count of completed reads (/sys/block/NAME/stat)."""

    def __init__(self, path):
        major, minor = os.major(os.stat(path).st_dev), os.minor(os.stat(path).st_dev)
        sysdir = os.path.realpath(f"/sys/dev/block/{major}:{minor}")
        if os.path.exists(os.path.join(sysdir, "partition")):
            sysdir = os.path.dirname(sysdir)
        self.sysdir = sysdir
        self.name = os.path.basename(sysdir)

    def read_ahead_kb(self):
        with open(os.path.join(self.sysdir, "queue", "read_ahead_kb")) as f:
            return int(f.read())

    def reads(self):
        with open(os.path.join(self.sysdir, "stat")) as f:
            fields = f.read().split()
        return int(fields[0]), int(fields[2]) * 512

    def settle(self, quiet_s=0.5, limit_s=120):
        """Waits until the device has completed no read for quiet_s."""
        last, since, end = self.reads(), time.monotonic(), time.monotonic() + limit_s
        while time.monotonic() < end:
            time.sleep(0.1)
            now = self.reads()
            if now != last:
                last, since = now, time.monotonic()
            elif time.monotonic() - since >= quiet_s:
                return


def write_wrapper(work, point):
    """work/run-app: CMD in a mount namespace of its own with the image's
    usr and etc over /usr and /etc (point None: CMD as it is)."""
    path = os.path.join(work, "run-app")
    overlay = "" if point is None else (
        'for d in usr etc; do\n'
        '    if [ -d "$IMG/$d" ]; then\n'
        '        mount -t overlay overlay -o "lowerdir=$IMG/$d:/$d" "/$d" || exit 125\n'
        '    fi\n'
        'done\n')
    body = ("#!/bin/sh\n# The start from the image (bench/launch_disk.py).\n"
            + ("" if point is None else
               f"IMG={point}\nexport IMG\n"
               "exec unshare -m --propagation private sh -c '\n" + overlay +
               "exec \"$@\"' run-app \"$@\"\n")
            + ('exec "$@"\n' if point is None else ""))
    with open(path, "w") as f:
        f.write(body)
    os.chmod(path, 0o755)
    return path


class Session:
    """The states of one application on one device, inside its namespace."""

    def __init__(self, device, work, command, point, container=None):
        self.work, self.command, self.point = work, command, point
        # A container's files come from its image's layer, not the overlay.
        self.container = container
        self.wrapper = write_wrapper(work, None if container else point)
        self.app = [self.wrapper, *command]
        self.env = dict(os.environ)
        self.device_name = device
        self.method = pagecache.choose_method()[0]
        self.disk = None
        self.files = []
        self.pack_path = os.path.join(work, "app.pack")
        # More states: launched-stale (the pack with every file's inode
        # changed); for pilots, launched-ra0 (a pack recorded with
        # read_ahead_kb 0, the default before issue 43) and read-gapN (the
        # sorted read alone, gaps of N pages filled); launched-bSIZE-gG.
        # LAUNCH_DISK_STATES: the states to run instead of STATES (cold
        # and hot at least: the shares are of cold - hot).
        base = tuple(s for s in os.environ.get("LAUNCH_DISK_STATES", "").split(",") if s)
        self.states = (base or STATES) + tuple(
            s for s in os.environ.get("LAUNCH_DISK_EXTRA", "").split(",") if s)

    def start(self, argv, beside=None):
        """Times argv (from before its fork to its exit); beside: argv of
        a process started just before it (the whole-file prefetch)."""
        other = spawn(beside) if beside else None
        started = time.perf_counter()
        proc = spawn(argv, env=self.env)
        status, last = finish(proc)
        elapsed = time.perf_counter() - started
        reap(proc)
        if other is not None:
            finish(other)
            reap(other)
        return elapsed, status, last

    def record(self):
        """The cold trace (the files to evict and to read whole), the
        traced start alone, and the pack; their times."""
        facts = {}
        drop_caches()
        cold = os.path.join(self.work, "cold.log")
        elapsed, status, last = self.traced(["-x", "-q"], cold)
        if status:
            sys.exit(f"launch_disk: trace of a cold start: exit status {status}: {last}")
        facts["traced_cold_s"] = round(elapsed, 3)
        trace = tracefile.read(cold)
        pages = tracefile.pages_by_file(trace)[0]
        # A path the tracer named through the overlay is the image's file.
        self.files = [self.point + p if self.point and not self.container
                      and not p.startswith(self.point)
                      and os.path.isfile(self.point + p) else p
                      for p in pages if not tracefile.is_metadata(p) and os.path.isfile(p)]
        here = os.stat(self.point).st_dev if self.point else None
        anchor = next((p for p in self.files if os.stat(p).st_dev == here), self.files[0])
        self.disk = Device(anchor)
        on_disk = [p for p in self.files if os.stat(p).st_dev == os.stat(anchor).st_dev]
        facts["cold_trace"] = {"files": len(self.files), "files_on_device": len(on_disk),
                               "metadata_pages": len({(r.path, r.offset) for r in trace.records
                                                      if tracefile.is_metadata(r.path)})}
        drop_caches()
        used = os.path.join(self.work, "used-alone.log")
        elapsed, status, last = self.traced(["--used", "-x", "-q"], used)
        facts["traced_used_s"] = round(elapsed, 3)
        target = ["--container", self.container] if self.container else []
        elapsed, status, err = pagetrace_pack(
            ["-o", self.pack_path, "--keep-traces", os.path.join(self.work, "pack-runs"),
             *target, "--", *self.app], self.env)
        facts["pack_s"] = round(elapsed, 3)
        if status:
            sys.exit(f"launch_disk: pagetrace pack: exit status {status}: "
                     + (err.splitlines() or ["no message"])[-1])
        facts["pack_runs_s"] = [float(s) for _, s in RUN_RECORDED.findall(err)]
        facts["pack_line"] = err.splitlines()[-1]
        if "launched-ra0" in self.states:
            # The pack as recorded before issue 43: read_ahead_kb 0 on every disk.
            elapsed, status, err = pagetrace_pack(
                ["--read-ahead-kb", "0", "-o", self.pack_path + ".ra0", *target,
                 "--", *self.app], self.env)
            facts["pack_ra0_s"] = round(elapsed, 3)
            facts["pack_ra0_runs_s"] = [float(s) for _, s in RUN_RECORDED.findall(err)]
            facts["pack_ra0_line"] = (err.splitlines() or [""])[-1]
        if "launched-preloads" in self.states:
            # The runs' traces, not the parts a container's run merged.
            runs = sorted(p for p in glob.glob(os.path.join(self.work, "pack-runs", "*.log"))
                          if re.fullmatch(r"run-\d+\.log", os.path.basename(p)))
            _, status, err = pagetrace_pack(
                [*(a for r in runs for a in ("--from", r)), "--preloads",
                 "-o", self.pack_path + ".preloads"], self.env)
            if status:
                sys.exit("launch_disk: pagetrace pack --preloads: "
                         + (err.splitlines() or ["no message"])[-1])
            facts["pack_preloads_line"] = err.splitlines()[-1]
        if "launched-target" in self.states and self.container:
            self.pack_from_parts("target", facts)
        pack = packfile.read(self.pack_path)
        if "launched-stale" in self.states:
            # Every file replaced, as after an upgrade: one line, no prefetch.
            packfile.write(pack._replace(files=[f._replace(ino=f.ino + (1 << 40))
                                                for f in pack.files]),
                           self.pack_path + ".stale")
        extra = [f.path for f in pack.files if f.path not in self.files
                 and not tracefile.is_metadata(f.path)]
        self.files += extra
        return facts

    def pack_from_parts(self, part, facts):
        """app.pack.PART: a pack of the runs' PART traces alone."""
        runs = sorted(glob.glob(os.path.join(self.work, "pack-runs", f"run-*.{part}.log")))
        _, status, err = pagetrace_pack([*(a for r in runs for a in ("--from", r)),
                                         "-o", f"{self.pack_path}.{part}"], self.env)
        if status:
            sys.exit(f"launch_disk: pagetrace pack --from *.{part}.log: "
                     + (err.splitlines() or ["no message"])[-1])
        facts[f"pack_{part}_line"] = err.splitlines()[-1]

    def traced(self, options, out):
        """One start of the application under trace OPTIONS, the trace in
        OUT: (seconds, exit status, last line). A container's start is
        traced as pack records it: its cgroup (trace --container NAME
        --wait, attached before docker run), docker run itself and the
        runtime's daemons, merged into OUT (packruntime.trace_run())."""
        if not self.container:
            return self.start([TRACER, *options, "-o", out, "--", *self.app])
        from pagetrace.tools import packruntime
        started = time.perf_counter()
        try:
            status = packruntime.trace_run([TRACER, *options],
                                           ["--container", self.container, "--wait"],
                                           self.app, out)
        except packruntime.TargetError as err:
            return time.perf_counter() - started, 1, str(err)
        return time.perf_counter() - started, status, ""

    def prepare(self, state):
        if state == "hot":
            pagecache.warm_files(self.files, self.method)
        elif state == "selective":
            pagecache.evict_files(self.files, self.method)
        else:
            drop_caches()
        time.sleep(0.2)

    def run(self, state):
        """(seconds, read part or None, exit status, message)."""
        self.prepare(state)
        read_s = None
        batched, lead = BATCHED.match(state), LEAD.match(state)
        if state in ("launched", "launched-ra0", "launched-stale", "launched-preloads",
                     "launched-target") \
                or batched or lead:
            pack = self.pack_path + {"launched-ra0": ".ra0", "launched-stale": ".stale",
                                     "launched-preloads": ".preloads",
                                     "launched-target": ".target"}.get(state, "")
            options = ["--batch", batched[1], "--batch-gap", batched[2]] if batched else []
            options += ["--window", batched[3]] if batched and batched[3] else []
            options += ["--lead", lead[1]] if lead else []
            elapsed, status, last = self.start([LAUNCHER, "-q", *options, pack, "--",
                                                *self.app])
        elif state == "whole-file":
            elapsed, status, last = self.start(
                self.app, beside=[sys.executable, "-I", "-S", "-c", WHOLE_FILE, *self.files])
        elif state.startswith("read-gap"):
            # Pilots: the sorted read alone, with gaps of N pages filled.
            read_s, status, last = self.sorted_read(state[len("read-gap"):])
            return read_s, None, status, last
        elif state == "pack-cached":
            # The pack's pages alone, no gaps filled; the read untimed.
            read_s, status, last = self.sorted_read("0")
            if status:
                return None, None, status, last
            elapsed, status, last = self.start(self.app)
        elif state == "bound":
            read_s, status, last = self.sorted_read()
            if status:
                return None, None, status, last
            pagecache.warm_files(self.files, self.method)
            elapsed, status, last = self.start(self.app)
            elapsed += read_s
        else:
            elapsed, status, last = self.start(self.app)
        return elapsed, read_s, status, last

    def sorted_read(self, gap=None):
        """The pack's sorted read (sorted_read() below, in a process of its
        own), gaps of GAP pages filled (None: the planner's): (seconds,
        exit status, last line)."""
        started = time.perf_counter()
        proc = spawn([sys.executable, "-I", "-S", os.path.join(TOP, "bench", "launch_disk.py"),
                      "sorted-read", self.pack_path, *([gap] if gap is not None else [])])
        status, last = finish(proc)
        reap(proc)
        return time.perf_counter() - started, status, last

    def iterations(self, n, csv_path, seed=43):
        rng = random.Random(seed)
        rows = []
        with open(csv_path, "w") as out:
            out.write("iteration,state,status,seconds,read_s,read_ahead_kb,"
                      "device_reads,device_bytes,loadavg\n")
            for iteration in range(n):
                order = list(self.states)
                rng.shuffle(order)
                for state in order:
                    self.disk.settle()
                    before = self.disk.reads()
                    ra = self.disk.read_ahead_kb()
                    elapsed, read_s, status, last = self.run(state)
                    self.disk.settle()
                    after = self.disk.reads()
                    row = {"iteration": iteration, "state": state, "status": status,
                           "seconds": elapsed, "read_s": read_s, "read_ahead_kb": ra,
                           "device_reads": after[0] - before[0],
                           "device_bytes": after[1] - before[1],
                           "loadavg": os.getloadavg()[0]}
                    rows.append(row)
                    out.write(",".join("" if row[k] is None else
                                       (f"{row[k]:.4f}" if isinstance(row[k], float)
                                        else str(row[k])) for k in row) + "\n")
                    out.flush()
                    print(f"launch_disk: [{iteration + 1}/{n}] {state}: "
                          + (f"{elapsed:.3f} s" if elapsed is not None else "failed")
                          + (f" (read {read_s:.3f} s)" if read_s else "")
                          + f", {row['device_reads']} reads, "
                          f"{row['device_bytes'] / 2**20:.1f} MiB, ra {ra} KiB"
                          + (f"; exit status {status}: {last}" if status else ""),
                          file=sys.stderr, flush=True)
        return rows


def summary(rows, states=STATES):
    """{state: {mean, low, high, n}} and {state: recovered share of cold - hot
    (Fieller's interval, paired by iteration)}."""
    ok = [r for r in rows if r["status"] == 0 and r["seconds"] is not None]
    by_state, by_iteration = {}, {}
    for r in ok:
        by_state.setdefault(r["state"], []).append(r["seconds"])
        by_iteration.setdefault(r["iteration"], {})[r["state"]] = r["seconds"]
    table = {s: dict(zip(("mean", "low", "high"), stats.mean_ci(v)), n=len(v))
             for s, v in by_state.items()}
    shares = {}
    for base in ("cold", "selective"):
        for state in states:
            if state in ("cold", "hot", base):
                continue
            full = [t for t in by_iteration.values() if {base, "hot", state} <= set(t)]
            if len(full) < 2:
                continue
            share, low, high = ratio_ci([t[base] - t[state] for t in full],
                                        [t[base] - t["hot"] for t in full])
            shares[(base, state)] = (share, low, high, len(full))
    return table, shares


def summary_text(rows, facts):
    states = tuple(dict.fromkeys(STATES + tuple(r["state"] for r in rows)))
    table, shares = summary(rows, states)
    lines = [f"{'state':12s} {'n':>3s} {'mean s':>8s}  95% CI"]
    for state in states:
        if state in table:
            t = table[state]
            lines.append(f"{state:12s} {t['n']:3d} {t['mean']:8.3f}  "
                         f"{t['low']:.3f}-{t['high']:.3f}")
    for (base, state), (share, low, high, n) in shares.items():
        interval = "unbounded" if low is None else f"{low:.0%} to {high:.0%}"
        lines.append(f"{state} recovers {share:.0%} of the I/O cost ({base} - hot; "
                     f"95% CI {interval}; {n} iterations)")
    reads = []
    for state in states:
        mine = [r for r in rows if r["state"] == state]
        if mine:
            reads.append(f"{state} {statistics.mean(r['device_reads'] for r in mine):.0f} "
                         f"requests, {statistics.mean(r['device_bytes'] for r in mine) / 2**20:.0f}"
                         " MiB")
    lines.append("device reads per run (mean): " + "; ".join(reads))
    ras = sorted({r["read_ahead_kb"] for r in rows})
    lines.append(f"read_ahead_kb of the device in every run: {', '.join(map(str, ras))}")
    lines.append("recording: " + json.dumps(facts))
    return "\n".join(lines)


def read_rows(csv_path):
    """The rows of a runs CSV as iterations() wrote them."""
    import csv
    rows = []
    with open(csv_path) as f:
        for r in csv.DictReader(f):
            rows.append({"iteration": int(r["iteration"]), "state": r["state"],
                         "status": int(r["status"]) if r["status"] else None,
                         "seconds": float(r["seconds"]) if r["seconds"] else None,
                         "read_ahead_kb": r["read_ahead_kb"]})
    return rows


def markdown(rows):
    """A markdown table of the states: mean and 95% CI, and the share of
    cold - hot recovered (Fieller's interval)."""
    states = tuple(dict.fromkeys(STATES + tuple(r["state"] for r in rows)))
    table, shares = summary(rows, states)
    out = ["| state | n | mean (s) | 95% CI (s) | recovers of cold − hot (95% CI) |",
           "| --- | ---: | ---: | ---: | ---: |"]
    for state in states:
        if state not in table:
            continue
        # read-gapN times a read alone, not a start: no share of it.
        t = table[state]
        share = None if state.startswith("read-") else shares.get(("cold", state))
        rec = "" if share is None else (
            f"{share[0]:.0%} ({share[1]:.0%} to {share[2]:.0%})" if share[1] is not None
            else f"{share[0]:.0%} (unbounded)")
        out.append(f"| {state} | {t['n']} | {t['mean']:.3f} | {t['low']:.3f}–{t['high']:.3f} "
                   f"| {rec} |")
    return "\n".join(out)


def sorted_read(pack_path, gap=None):
    """The bound's read: the pack's pages by the launch's own sorted plan."""
    from pagetrace.tools import launch
    return launch.sorted_prefetch_only(pack_path, gap=None if gap is None else int(gap))


def inside(device, work, n, command, container=None):
    """The session in this (private) mount namespace; container: (name,
    root tar) of a container start (bench/launch_container.py)."""
    signal.signal(signal.SIGTERM, _interrupt)
    signal.signal(signal.SIGHUP, _interrupt)
    try:
        # Nothing here is shared with the rest of the machine: unshare -m
        # made this namespace, and its mounts go with its last process.
        subprocess.run(["mount", "--make-rprivate", "/"], check=True)
        if container:
            return inside_container(device, work, n, command, container)
        if device == "machine":
            return run_all(device, work, n, command, None)
        image, point = os.path.join(work, "app.img"), os.path.join(work, "img")
        with diskemu.EmulatedDisk(image, device, mount=point):
            return run_all(device, work, n, command, point)
    finally:
        kill_groups()


def inside_container(device, work, n, command, container):
    import launch_container
    name, tar = container
    with launch_container.daemon(os.path.join(os.path.dirname(work), "docker")) as env:
        os.environ.update(env)
        layer = launch_container.ensure_image(env, tar)
        if device == "machine":
            return run_all(device, work, n, command, None, name)
        image = launch_container.layer_image(layer, os.path.join(work, "app.img"))
        point = os.path.join(work, "img")
        os.makedirs(point, exist_ok=True)
        with diskemu.EmulatedDisk(image, device, mount=point):
            launch_container.bind_over(point, layer)
            try:
                return run_all(device, work, n, command, point, name)
            finally:
                kill_groups()
                subprocess.run(["umount", "-l", layer])


def run_all(device, work, n, command, point, container=None):
    session = Session(device, work, command, point, container)
    facts = session.record()
    facts["device"] = device
    facts["emulated_device"] = session.disk.name
    rows = session.iterations(n, os.path.join(work, f"runs-{device}.csv"))
    print(summary_text(rows, facts), flush=True)
    return 0


def build_image(command, work, env, skip):
    """work/app.img: the files a cold start of command reads on the
    machine's disk, in package-install order (scripts/firefox-hdd-image),
    left unmounted (the bench mounts it in its own namespace only)."""
    image, point = os.path.join(work, "app.img"), os.path.join(work, "img")
    if os.path.exists(image):
        return image
    drop_caches()
    trace = os.path.join(work, "machine-cold.log")
    subprocess.run([TRACER, "-x", "-q", "-o", trace, "--", *command], env=env,
                   stdin=subprocess.DEVNULL, capture_output=True, check=True)
    done = subprocess.run([sys.executable, os.path.join(TOP, "scripts", "firefox-hdd-image"),
                           trace, image + ".new", point, os.path.join(work, "img-cold.log"),
                           "--skip", skip], capture_output=True, text=True)
    subprocess.run(["umount", point], capture_output=True)
    if done.returncode:
        sys.exit("launch_disk: firefox-hdd-image: " + done.stderr.strip()[-300:])
    os.rename(image + ".new", image)
    return image


def run_device(device, work, n, command, env, skip, container=None):
    """The session on DEVICE in a private mount namespace (for an emulated
    disk: the image built first); its summary text, or None if it failed.
    container: (name, root tar) of a container start."""
    os.makedirs(work, exist_ok=True)
    if device != "machine" and not container:
        build_image(command, work, env, skip)
    target = ["--container", *container] if container else []
    proc = subprocess.Popen(["unshare", "-m", "--propagation", "private", sys.executable,
                             os.path.abspath(__file__), "inside", device, work, str(n),
                             *target, "--", *command], env=env, stdout=subprocess.PIPE,
                            text=True)
    try:
        out, _ = proc.communicate()
    except KeyboardInterrupt:
        # The session puts everything back itself: let it (subprocess.run
        # would kill it at once).
        proc.send_signal(signal.SIGINT)
        proc.wait()
        raise
    return out if proc.returncode == 0 else None


def main(argv):
    if len(argv) == 2 and argv[0] == "markdown":
        print(markdown(read_rows(argv[1])))
        return 0
    if len(argv) >= 2 and argv[0] == "sorted-read":
        return sorted_read(*argv[1:3])
    container = None
    if len(argv) > 7 and argv[4] == "--container":
        container, argv = (argv[5], argv[6]), argv[:4] + argv[7:]
    if len(argv) < 6 or argv[0] != "inside" or argv[4] != "--":
        sys.exit(__doc__[__doc__.index("USAGE"):])
    try:
        return inside(argv[1], argv[2], int(argv[3]), argv[5:], container)
    except KeyboardInterrupt:
        print("launch_disk: interrupted: the runs' processes killed, the "
              "emulated disk detached", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
