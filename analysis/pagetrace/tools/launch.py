"""The launch's planner: `pagetrace launch PACK -- CMD` where the C
launcher (launch/launch, installed as pagetrace-launch, which the front
door runs) hands the launch over: a device where seeks or a read cap
dominate, --mode sorted or planned, and --refine. It takes the same
options and does the whole launch again; run on its own it also does the
concurrent mode (its prefetch, launch_prefetch.py, is --refine's beside
the start). It prefetches the pages of a pack (docs/pack-format.md) and
starts CMD; the exit status is CMD's (CMD replaces this process, or with
--refine its status is passed on).

1. Each file of the pack is checked against the file on disk: device,
   inode, size and mtime with one stat(); where the prefetch is concurrent,
   the CRC-32 of its first 4 KiB too. A file that is missing, replaced (a
   new inode, another device) or changed is not prefetched; the skipped
   files are named on one line.
2. The mode comes from the devices of the files left
   (`device_mode`): where a request is cheap (not rotational, no
   blk-throttle read-IOPS limit on this process's cgroup), the prefetch
   runs beside CMD in first-access order (launch_prefetch.py), as
   Android's iorap did; where seeks or a request cap dominate, `replay --sorted --prefetch`
   reads the list in disk order before CMD starts, with the gaps between
   ranges up to what one request costs filled so that it reads in few
   requests (docs/lab/case-study-firefox.md, "Slow storage": at 150 IOPS the
   first-access-order prefetch made firefox 8.5x slower); under a cap
   that the plan's bytes reach before its requests (cloud-3000), the
   plan's requests go beside CMD in first-access order (planned). The
   plans and their costs are launch_plan.py's.
3. When nothing is left to prefetch, CMD is started at once.

The sorted reads are replay's (`replay --sorted --prefetch`: FIEMAP
order); this module decides what and how. Standard library only: it runs
on the system Python, from a systemd unit or under sudo.
"""
import argparse
import os
import shutil
import sys
import time

from pagetrace import __version__
from pagetrace.core import packfile
from pagetrace.tools import launch_prefetch
from pagetrace.tools.launch_sorted import find_replay, sorted_prefetch, start_lead
from pagetrace.tools.launch_files import (PROG, LaunchError, check_files, content_changed,
                                          file_devices, leave_cmd_output, say, skipped_line)
from pagetrace.tools.launch_plan import (SEEK_US, bandwidth_bound, cold_cost, plan_cost,
                                         sorted_plan)

DEFAULT_MAX_AGE = "30d"
# A disk that seeks and has no throttle that says what a request costs is
# planned as the hdd-150 profile (docs/replay.md): a short seek costs
# 6.7 ms, in which a 150 MB/s disk transfers 1 MB.
SEEKING_DISK = (150, 150_000_000)
MODES = ("auto", "concurrent", "planned", "sorted", "none")
# The mode auto chooses for each kind of device (device_mode); a capped
# device whose plan is bandwidth_bound gets planned instead of sorted.
AUTO_MODE = {"cheap": "concurrent", "capped": "sorted", "seeks": "sorted"}
# planned where requests are cheap: gaps of up to this many pages between
# ranges filled (with no cap to plan for).
CHEAP_GAP = 16
# The modes whose prefetch runs beside CMD, in first-access order.
BESIDE_MODES = ("concurrent", "planned")
# Beside the start: at most this much asked for and not yet read, so that
# CMD's own reads wait behind little of the prefetch in the device's queue
# (the C launcher's DEFAULT_WINDOW, measured there: launch/launch.h).
BESIDE_WINDOW = 1 << 20
# Beside the start under a cap on read bytes per second (bandwidth_bound):
# the cap, not the device's queue, orders the reads (blk-throttle passes
# them first in, first out), and a deeper queue keeps the cap busy while
# the prefetch reads back. Pilot, firefox-esr under cloud-3000 (8 rounds,
# 2026-11-27, docs/lab/case-study-firefox.md): 2M 63%, 4M 65-67%, 8M 66-67%,
# 16M 61% of the I/O cost, against 61% for the sorted prefetch before.
CAPPED_WINDOW = 8 << 20
# A sorted prefetch must be estimated at most this share of the start's
# own cold reads to be worth paying before the start (worth_it): measured
# (2026-11-27, 1 MiB requests) it paid at 0.27 (firefox-esr, cloud-3000),
# 0.86 and 0.94 (firefox-esr and chromium, hdd-150).
WORTH_IT = 1.0


# ---------------------------------------------------------------------------
# 2. The device: what a request costs.

def _sys_int(path):
    try:
        with open(path) as f:
            return int(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        return None


def _disk(dev):
    from pagetrace.tools import throttle
    major, _, minor = dev.partition(":")
    try:
        return throttle.dev_text(throttle.whole_disk(
            os.makedev(int(major), int(minor))))
    except (throttle.ThrottleError, OSError, ValueError):
        return dev


def cgroup_read_limits(disk, proc_cgroup="/proc/self/cgroup"):
    """(riops, rbps) blk-throttle puts on this process's reads of `disk`
    (MAJ:MIN), from its cgroup and every ancestor (the smallest wins),
    None for no limit; (None, None) when there is no blk-throttle."""
    from pagetrace.tools import throttle
    try:
        hierarchy = _usual_hierarchy() or throttle.find_hierarchy()
        with open(proc_cgroup) as f:
            lines = f.read().splitlines()
    except (throttle.ThrottleError, OSError):
        return None, None
    path = None
    for line in lines:
        _, controllers, where = line.split(":", 2)
        if (controllers == "" if hierarchy.version == 2
                else "blkio" in controllers.split(",")):
            path = where
    if path is None:
        return None, None
    if hierarchy.root != "/" and path.startswith(hierarchy.root):
        path = path[len(hierarchy.root):] or "/"
    limits = {"riops": [], "rbps": []}
    parts = [p for p in path.split("/") if p]
    for depth in range(len(parts), -1, -1):
        directory = os.path.join(hierarchy.point, *parts[:depth])
        _limits_in(directory, hierarchy.version, disk, limits)
    return (min(limits["riops"], default=None), min(limits["rbps"], default=None))


def _usual_hierarchy():
    """The hierarchy at its usual place, found without parsing mountinfo
    (which costs milliseconds on a machine with many mounts); None when it
    is elsewhere. Assumes the mount's root is the hierarchy's root, as
    outside a container."""
    from pagetrace.tools import throttle
    v1 = "/sys/fs/cgroup/blkio"
    if os.path.exists(f"{v1}/blkio.throttle.read_iops_device"):
        return throttle.Hierarchy(1, v1, "/")
    try:
        with open("/sys/fs/cgroup/cgroup.controllers") as f:
            if "io" in f.read().split():
                return throttle.Hierarchy(2, "/sys/fs/cgroup", "/")
    except OSError:
        pass
    return None


def _limits_in(directory, version, disk, limits):
    if version == 1:
        for key, name in (("riops", "read_iops_device"), ("rbps", "read_bps_device")):
            try:
                with open(f"{directory}/blkio.throttle.{name}") as f:
                    for line in f:
                        dev, _, value = line.partition(" ")
                        if dev == disk and value.strip().isdigit():
                            limits[key].append(int(value))
            except OSError:
                pass
        return
    try:
        with open(f"{directory}/io.max") as f:
            for line in f:
                fields = line.split()
                if fields and fields[0] == disk:
                    for field in fields[1:]:
                        key, _, value = field.partition("=")
                        if key in limits and value.isdigit():
                            limits[key].append(int(value))
    except OSError:
        pass


def device_mode(devices, measured=None):
    """(kind, why, (riops, rbps) to plan a prefetch for) for the devices
    (MAJ:MIN) of the files to prefetch. kind: "seeks" when a random read
    of one of them took SEEK_US or more when the pack was made
    (`measured`, the pack's request-us) or, not measured, it says it is
    rotational (planned as SEEKING_DISK unless also capped); "capped" when
    one of their disks is capped in read requests per second (blk-throttle
    on this process's cgroup: the cap); "cheap" otherwise (no cap).
    AUTO_MODE maps the kind to a mode."""
    cap, reasons, seeks, measured = None, [], False, measured or {}
    for dev in sorted(devices):
        disk = _disk(dev)
        riops, rbps = cgroup_read_limits(disk)
        if riops:
            if cap is None or riops < cap[0]:
                cap = (riops, rbps)
            reasons.append(f"{disk}: blk-throttle caps reads at {riops}/s")
        elif dev in measured:
            if measured[dev] >= SEEK_US:
                seeks = True
                reasons.append(f"{dev}: a random read took {measured[dev]} us")
        elif _sys_int(f"/sys/dev/block/{disk}/queue/rotational") == 1:
            seeks = True
            reasons.append(f"{disk}: rotational")
    if reasons:
        return ("seeks" if seeks else "capped"), "; ".join(reasons), cap or SEEKING_DISK
    return "cheap", "requests are cheap (" + ", ".join(
        f"{d}: {measured[d]} us a random read" if d in measured else f"{d}: not rotational"
        for d in sorted(devices)) + "; no read-IOPS cap)", None


def start_concurrent(pack, data, source, keep, window, skipped=None, ranges=None):
    """The prefetch beside CMD, in first-access order (launch_prefetch:
    posix_fadvise WILLNEED range by range). The files' content is checked
    (unless `skipped` is None; the line of skipped files is said then) and
    the ranges read in a grandchild (forked twice, so that it is nobody's
    zombie once CMD has replaced this process), so that CMD starts without
    waiting for them."""
    child = os.fork()
    if child == 0:
        try:
            if os.fork() == 0:
                leave_cmd_output()
                if skipped is not None:
                    keep = _verify_content(pack, keep, skipped)
                    if skipped:
                        say(skipped_line(skipped, len(pack.files)))
                if keep:
                    launch_prefetch.prefetch(pack, data, source, keep, window, ranges)
        except Exception as err:  # noqa: BLE001 - the child must not return
            say(f"warning: the prefetch failed: {err}")
        os._exit(0)
    os.waitpid(child, 0)


# ---------------------------------------------------------------------------
# The command line.

EXAMPLES = """\
examples:
  pagetrace launch firefox.pack -- firefox-esr --headless --screenshot /tmp/s.png
  pagetrace launch firefox-esr-1a2b3c4d -- firefox-esr ...   # from the packs dir
  sudo pagetrace launch --refine app.pack -- ./app    # prefetch, record, update
  pagetrace launch --mode sorted --max-age 7d app.pack -- ./app
  ExecStart=/usr/local/bin/pagetrace launch /var/lib/pagetrace/packs/d.pack -- /usr/sbin/d

Nothing is written to the files; a pack that cannot be used (another
format version, corrupt, too old, every file changed) is reported on one
line and CMD starts without prefetch (with --strict: exit 1 instead).

exit status: CMD's; 127 CMD not found; 1 with --strict when the pack
cannot be used; 2 bad usage.
"""


def age_seconds(text):
    units = {"s": 1, "m": 60, "h": 3600, "d": 86400}
    number, unit = (text[:-1], text[-1]) if text[-1:] in units else (text, "d")
    if not number.isdigit():
        raise argparse.ArgumentTypeError("a number with s, m, h or d (default d)")
    return int(number) * units[unit]


def size_bytes(text):
    units = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    number, unit = (text[:-1], units[text[-1].upper()]) if text[-1:].upper() in units else (text, 1)
    if not number.isdigit() or int(number) == 0:
        raise argparse.ArgumentTypeError("a size in bytes, with K, M or G")
    return int(number) * unit


def build_parser(prog=PROG):
    p = argparse.ArgumentParser(
        prog=prog, formatter_class=argparse.RawDescriptionHelpFormatter,
        usage="%(prog)s [options] PACK -- CMD [ARGS...]",
        description="Prefetch the pages of a pack made by pagetrace pack, in "
        "the mode the device calls for, and start CMD.", epilog=EXAMPLES)
    p.add_argument("-V", "--version", action="version",
                   version=f"%(prog)s (pagetrace) {__version__}")
    p.add_argument("pack", help="the pack file, or its name in the packs "
                   "directory ($PAGETRACE_PACKS, default /var/lib/pagetrace/packs)")
    p.add_argument("--mode", choices=MODES, default="auto",
                   help="auto (default): from the device; concurrent: beside "
                   "CMD in first-access order; planned: beside CMD in "
                   "first-access order, in the sorted plan's requests, at "
                   "most --window queued (auto's choice under a bandwidth "
                   "cap); sorted: in disk order before CMD (auto's under a "
                   "request cap or a seeking disk); none: check the pack, "
                   "prefetch nothing")
    p.add_argument("--verify", choices=("auto", "stat", "content"),
                   default="auto", help="stat: device, inode, size, mtime; "
                   "content: also the CRC-32 of each file's first 4 KiB (a "
                   "read per file); auto (default): content when beside CMD "
                   "(concurrent, planned)")
    p.add_argument("--max-age", type=age_seconds, default=DEFAULT_MAX_AGE,
                   metavar="AGE", help="a pack older than AGE (s, m, h, d; "
                   "default 30d) is not used")
    p.add_argument("--refine", action="store_true",
                   help="trace this launch (trace --used, root) and add the "
                   "pages it read itself to the pack")
    p.add_argument("--gap", metavar="PAGES", type=int,
                   help="sorted, planned: fill the gaps of up to PAGES pages "
                   "between a file's ranges (default: what the device's "
                   "read cap makes cheapest; without a cap, planned %d, "
                   "sorted 0)" % CHEAP_GAP)
    p.add_argument("--lead", metavar="MS", type=lead_ms, default="auto",
                   help="sorted, on a seeking device: start CMD when the read's "
                   "estimated time left is MS milliseconds (auto, the default: how "
                   "long the recorded start ran before it used that device; 0: "
                   "after the whole read)")
    p.add_argument("--window", metavar="SIZE", type=size_bytes,
                   help="concurrent, planned: at most SIZE bytes (K, M, G) "
                   "asked for and not yet read (default 1M; 8M for planned "
                   "under a cap)")
    p.add_argument("--batch", metavar="SIZE",
                   help="the C launcher's (beside CMD where requests are cheap)")
    p.add_argument("--batch-gap", metavar="PAGES", type=int,
                   help="the C launcher's, with --batch")
    p.add_argument("--replay", metavar="PATH", help="the replayer (default: "
                   "replay/replay of the source tree, else pagetrace-replay)")
    p.add_argument("--report", metavar="FILE",
                   help="write what was decided as JSON to FILE")
    p.add_argument("--strict", action="store_true",
                   help="exit 1 instead of starting CMD without prefetch when "
                   "the pack cannot be used")
    p.add_argument("-q", "--quiet", action="store_true",
                   help="only problems on stderr")
    return p


def lead_ms(text):
    """--lead: auto, or a whole number of milliseconds (up to 600,000)."""
    if text == "auto" or (text.isdigit() and int(text) <= 600_000):
        return text
    raise argparse.ArgumentTypeError(f"'{text}': not auto or milliseconds from 0 to 600000")


def main(argv=None, prog=PROG):
    global PROG
    PROG = prog
    started = time.perf_counter()
    argv = sys.argv[1:] if argv is None else list(argv)
    cut = argv.index("--") if "--" in argv else len(argv)
    parser = build_parser(prog)
    args = parser.parse_args(argv[:cut])
    command = argv[cut + 1:]
    if not command:
        parser.error("give, after --, the command to start")
    if shutil.which(command[0]) is None:
        say(f"{packfile.escape(command[0])}: command not found")
        return 127
    try:
        report = prepare(args, command, started)
    except LaunchError as err:
        say(str(err))
        return err.status
    pack = report.pop("pack_data", None)
    if args.report:
        import json
        with open(args.report, "w") as f:
            json.dump(report, f, indent=1)
    if args.refine:
        from pagetrace.tools import packrefine
        return packrefine.run_and_refine(args, command, pack, say)
    sys.stdout.flush()
    sys.stderr.flush()
    os.execvp(command[0], command)


def prepare(args, command, started):
    """Checks the pack and starts (or runs) the prefetch; the report."""
    report = {"pack": args.pack, "mode": None, "files": 0, "prefetched_files": 0,
              "pages": 0, "skipped": {}, "problem": None, "lead_s": None}

    def unusable(message):
        if args.strict:
            raise LaunchError(message)
        say(message + ": starting without prefetch")
        report["problem"] = message
        report["launch_s"] = time.perf_counter() - started
        return report
    path = packfile.find_pack(args.pack)
    try:
        data = packfile.load(path)
        pack = packfile.parse_bytes(data, path, ranges=False)
    except packfile.PackError as err:
        return unusable(str(err))
    report["files"] = len(pack.files)
    age = time.time() - pack.created
    if age > args.max_age:
        return unusable(f"{packfile.escape(path)}: the pack is {age / 86400:.1f} "
                        f"days old, older than --max-age {args.max_age / 86400:g} "
                        "days: record it again (pagetrace pack, or --refine)")
    keep, skipped = check_files(pack)
    mode, cap, plan, pack = _choose_mode(args.mode, pack, data, path, keep, report)
    beside = mode in BESIDE_MODES
    verify = args.verify == "content" or (args.verify == "auto" and beside)
    if keep and verify and not beside:
        keep = _verify_content(pack, keep, skipped)
    report.update(mode=mode, skipped=skipped, prefetched_files=len(keep))
    if keep and mode != "none" and args.batch and size_bytes(args.batch):
        say(f"warning: --batch: the planner's {mode} prefetch does not batch (only "
            "the C launcher's does): ignored")
    # Beside the start: the content check is the prefetching child's, which
    # says what it skipped with the rest, so that CMD does not wait for it.
    if skipped and not (keep and beside and verify):
        say(skipped_line(skipped, len(pack.files)))
    if not keep or mode == "none":
        report["launch_s"] = time.perf_counter() - started
        return report
    replay = None if beside else find_replay(args.replay)
    if not beside and replay is None:
        return unusable("the replayer is missing (replay/replay: run make; or "
                        "pagetrace-replay: make install; or give --replay)")
    ranges = window = None
    if mode != "concurrent":
        if pack.ranges is None:
            pack = packfile.parse_bytes(data, path)
        gap, largest = _plan(args, pack, keep, cap, report, plan)
        if gap is None:
            report["launch_s"] = time.perf_counter() - started
            return report
        if mode == "planned":
            ranges = launch_prefetch.first_access_plan(pack, keep, gap, largest)
            window = args.window or (CAPPED_WINDOW if cap else BESIDE_WINDOW)
            report.update(pages=sum(r[2] for r in ranges), window=window)
    ahead = None if beside else _lead(args, pack, keep, report)
    if not args.quiet:
        say(f"prefetching {len(keep)} of {len(pack.files)} files, {mode}"
            + (" beside the start" if beside else " before the start")
            + (f", CMD started {ahead[0]:.2f} s before its estimated end"
               if ahead and ahead[0] else "")
            + f" ({report.get('device', 'mode given')})")
    if beside:
        if mode == "concurrent":
            report["pages"] = None  # counted by the child that reads them
            window = args.window or BESIDE_WINDOW
        start_concurrent(pack, data, path, keep, window,
                         skipped if verify else None, ranges)
    else:
        report["pages"], problem = sorted_prefetch(pack, keep, gap, largest, replay, ahead)
        if problem:
            say(f"warning: the prefetch failed ({problem}): starting anyway")
            report["problem"] = problem
    report["launch_s"] = time.perf_counter() - started
    report["pack_data"] = pack
    return report


def _lead(args, pack, keep, report):
    """(lead seconds, seeking devices) for sorted_prefetch, or None: the
    sorted read on a device whose random read the pack measured at SEEK_US
    or more is not waited for to its end; CMD starts when its estimated
    time left is the lead (--lead MS; auto: start_lead, how long the
    recorded start ran before it first used a file there). The start's
    first part (a runtime, a launcher, files of other devices) overlaps the
    read's tail."""
    seeking = {d for d in file_devices(pack, keep) if pack.request_us.get(d, 0) >= SEEK_US}
    if not seeking or args.refine:
        return None
    lead = start_lead(pack, keep, seeking) if args.lead == "auto" else int(args.lead) / 1000
    report["lead_s"] = round(lead, 3)
    return lead, seeking


def _choose_mode(mode, pack, data, path, keep, report):
    """(mode, cap, plan, pack) for the kept files: MODE unless auto, else
    AUTO_MODE's for the device, or planned under a cap that the plan's
    bytes reach first; the cap to plan for (device_mode); the sorted plan
    when it was made for that choice (the pack then with its ranges)."""
    cap = plan = None
    if keep and mode != "none":
        kind, report["device"], cap = device_mode(file_devices(pack, keep),
                                                  pack.request_us)
        if mode == "auto":
            mode = AUTO_MODE[kind]
            if kind == "capped":
                pack = packfile.parse_bytes(data, path)
                plan = sorted_plan(pack, keep, *cap)
                if bandwidth_bound(pack, keep, cap, plan):
                    mode = "planned"
    return mode, cap, plan, pack


def _plan(args, pack, keep, cap, report, plan=None):
    """(gap pages to fill, largest request in pages) of the sorted or
    planned prefetch; (None, None) when it is not worth it (said on one
    line). On a device where requests are cheap (--mode sorted or
    planned): exactly the pack's pages, in requests of 1 MiB."""
    gap, largest = plan or (sorted_plan(pack, keep, *cap) if cap else (0, 256))
    if args.gap is not None:
        gap = args.gap
    elif not cap and args.mode != "sorted":
        gap = CHEAP_GAP
    if cap and args.mode == "auto" and not worth_it(pack, keep, gap, largest, cap, report):
        if not args.quiet:
            say(f"no prefetch: {report['skipped_because']}")
        return None, None
    report.update(gap_pages=gap, max_request_pages=largest)
    return gap, largest


def worth_it(pack, keep, gap, largest, cap, report):
    """Whether the sorted prefetch, paid before the start, is estimated at
    most WORTH_IT of what the start's own reads cost cold (cold_cost with
    the disk's read_ahead_kb). Paid before the start it adds to it, while
    a cold start's reads overlap its computing. Measured with 1 MiB
    requests (2026-11-27, docs/lab/case-study-firefox.md): it paid off at 0.27
    of the estimate (firefox-esr, cloud-3000: 60% of the I/O cost
    recovered) and at 0.86 and 0.94 (firefox-esr and chromium under
    hdd-150: 0.94 s and 2.50 s faster than selectively cold, 6 pairs
    each). The 0.5 of 2026-11-25 came from sessions on a loaded machine
    (hot starts 3-8x slower), one of them with a plan of 8 MiB requests,
    which blk-throttle charged as many reads."""
    dev = min(file_devices(pack, keep) or {pack.files[keep[0]].dev})
    read_ahead = _sys_int(f"/sys/dev/block/{_disk(dev)}/queue/read_ahead_kb") or 0
    estimate, requests, pages = plan_cost(pack, keep, gap, largest, *cap)
    cold = cold_cost(pack, keep, *cap, read_ahead * 1024 // pack.page_size)
    report.update(estimate_s=round(estimate, 3), cold_estimate_s=round(cold, 3))
    if estimate <= WORTH_IT * cold:
        return True
    report["mode"] = "none"
    report["skipped_because"] = (
        f"the sorted prefetch ({requests:,} reads, {pages * pack.page_size / 2**20:.1f} MiB, "
        f"about {estimate:.1f} s before the start) would cost more than {WORTH_IT:g} of "
        f"the start's own cold reads (about {cold:.1f} s) on this device")
    return False


def _verify_content(pack, keep, skipped):
    """The files of `keep` whose first 4 KiB still have their CRC-32; the
    others are added to `skipped`. Their first pages are asked for all at
    once (WILLNEED) so that the device reads them in parallel, then each
    is checked."""
    for index in keep:
        try:
            fd = os.open(pack.files[index].path, os.O_RDONLY | os.O_CLOEXEC)
            os.posix_fadvise(fd, 0, packfile.HEAD_BYTES, os.POSIX_FADV_WILLNEED)
            os.close(fd)
        except OSError:
            pass
    still = []
    for index in keep:
        if content_changed(pack.files[index]):
            skipped.setdefault("changed (content)", []).append(pack.files[index].path)
        else:
            still.append(index)
    return still


def sorted_prefetch_only(pack_path, replay=None, gap=None):
    """The sorted read of the pack at PACK_PATH as `launch --mode sorted`
    plans it for its device (or with gaps of `gap` pages filled), and
    nothing else: 0, or 1 with one line."""
    pack = packfile.read(pack_path)
    keep, _ = check_files(pack)
    _, _, cap = device_mode(file_devices(pack, keep), pack.request_us)
    planned, largest = sorted_plan(pack, keep, *(cap or SEEKING_DISK))
    gap = planned if gap is None else gap
    _, problem = sorted_prefetch(pack, keep, gap, largest, find_replay(replay))
    if problem:
        say(f"the sorted read failed: {problem}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
