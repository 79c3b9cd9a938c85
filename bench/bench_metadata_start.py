#!/usr/bin/env python3
"""Simulated against real cold start of a metadata-heavy workload.

The 2011 study simulated a cold start as "replay the traced reads with
O_DIRECT, then start warm", and named the metadata its trace lacked as why
the simulation missed the real cold start by 2.35%. Here the workload is
`find DIR -type f | xargs cat` over 3,000 small files in 100 directories on
a fresh ext4 (4 KiB blocks) and xfs image, on a loop device with direct I/O
(so reads reach the disk under /var/tmp, not the image file's page cache).
The workload and replay run in a blk-throttle cgroup (pagetrace.throttle:
v2 io.max, else v1 blkio.throttle) that limits reads from
the loop device to --iops per second (default 2,000, a modest SSD): I/O time
then dominates and does not swing with what else the shared disk is doing.

Per filesystem, alternating round by round, each after a remount and
drop_caches:
  cold              the workload, timed
  simulated         replay of the whole trace (files and metadata), then the
                    workload warm (its second run): replay time + warm time
  simulated, files  the same, the trace without its metadata records
Prints a Markdown table with ratios to the cold start: the median of the
per-round ratios, and their mean with a 95% t-interval. "Within noise" is
an interval that holds 1. Beside them, the reads on the loop device that
blk-throttle charged to the cgroup and that the device completed, during
the cold run and during the replay: the throttle charges bios before the
block layer merges them, so a cold run whose bios merge pays for more
reads than the device sees, and replay (one bio a request) does not.

Run as root:  sudo bench/bench_metadata_start.py [--rounds 5] [--iops 2000]
              sudo bench/bench_metadata_start.py --filesystems ext4 \
                   --ext4-options inode_readahead_blks=0
"""
import argparse
import collections
import contextlib
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
TRACE = os.path.join(REPO, "tracer", "trace")
REPLAY = os.path.join(REPO, "replay", "replay")
WORK_DIR = "/var/tmp/pagetrace-bench"
FILES, DIRS = 3000, 100
MKFS = {"ext4": ["mkfs.ext4", "-q", "-b", "4096", "-E", "lazy_itable_init=0,lazy_journal_init=0"],
        "xfs": ["mkfs.xfs", "-q", "-f"]}


def run(*cmd, **kw):
    return subprocess.run(cmd, check=True, capture_output=True, text=True, **kw)


sys.path.insert(0, os.path.join(REPO, "analysis"))
from pagetrace import throttle  # noqa: E402  (standard library only)
from pagetrace.stats import mean_ci  # noqa: E402

# Mount options per filesystem (--ext4-options).
MOUNT_OPTIONS = {"ext4": "defaults", "xfs": "defaults"}

# One filesystem image under test; cgroup: the throttle.Cgroup whose
# blk-throttle limits the loop device's reads, or None (--iops 0).
Image = collections.namedtuple("Image", "device mountpoint fstype cgroup")


def mount(image):
    run("mount", "-t", image.fstype, "-o", MOUNT_OPTIONS[image.fstype], image.device,
        image.mountpoint)


def cold(image):
    run("umount", image.mountpoint)
    mount(image)
    run("sync")
    with open("/proc/sys/vm/drop_caches", "w") as f:
        f.write("3")


def read_counts(image):
    """(reads blk-throttle charged to the cgroup on the loop device, reads the
    device completed): the throttle charges each bio before the block layer
    merges bios into requests, so the first can exceed the second
    (/proc/diskstats)."""
    charged = image.cgroup.counts()[0] if image.cgroup else 0
    with open("/proc/diskstats") as f:
        completed = next(int(line.split()[3]) for line in f
                         if line.split()[2] == os.path.basename(image.device))
    return charged, completed


def counted(image, fn, *args):
    """FN(*ARGS), and the reads charged and completed meanwhile."""
    before = read_counts(image)
    result = fn(*args)
    after = read_counts(image)
    return result, (after[0] - before[0], after[1] - before[1])


def workload(image):
    """Seconds of `find | xargs cat` over the image, started in its cgroup."""
    start = time.perf_counter()
    with image.cgroup.spawning() if image.cgroup else contextlib.nullcontext():
        proc = subprocess.Popen(["sh", "-c", f"find {image.mountpoint} -type f | "
                                 "xargs cat > /dev/null"])
    if proc.wait() != 0:
        raise RuntimeError(f"the workload exited with status {proc.returncode}")
    return time.perf_counter() - start


def replay_seconds(image, trace):
    # --cgroup: replay joins the throttled cgroup once it has opened the
    # trace's files. Started inside it, the 200 or so directory and inode
    # reads of that opening would use up the budget blk-throttle grants a
    # cgroup at the start of a time slice, which the cold run gets for its
    # own first reads (docs/replay.md, "Your own cgroup").
    cgroup = ["--cgroup", image.cgroup.dir] if image.cgroup else []
    return json.loads(run(REPLAY, "-q", "--json", *cgroup, trace).stdout)["elapsed_s"]


def cold_start(image):
    cold(image)
    return counted(image, workload, image)


def simulated(image, trace):
    """(replay + warm seconds, the replay's reads charged and completed)"""
    cold(image)
    replayed, reads = counted(image, replay_seconds, image, trace)
    workload(image)                 # warms the cache: replay's O_DIRECT reads do not
    warm = workload(image)
    print(f"bench_metadata_start:   replay {replayed:.3f} s + warm {warm:.3f} s",
          file=sys.stderr)
    return replayed + warm, reads


def fill(mountpoint):
    rng = random.Random(7)
    for d in range(DIRS):
        os.mkdir(os.path.join(mountpoint, f"d{d:03}"))
    for i in range(FILES):
        with open(os.path.join(mountpoint, f"d{i % DIRS:03}", f"f{i:05}"), "wb") as f:
            f.write(rng.randbytes(rng.randint(1, 12 << 10)))


def rounds_of(image, rounds, full, files_only):
    """Times and read counts of each variant, the order rotating by round."""
    times = {"cold": [], "simulated": [], "simulated, files only": []}
    reads = {name: [] for name in times}
    steps = [("cold", lambda: cold_start(image)),
             ("simulated", lambda: simulated(image, full)),
             ("simulated, files only", lambda: simulated(image, files_only))]
    for r in range(rounds):
        for name, step in steps[r % 3:] + steps[:r % 3]:
            seconds, counts = step()
            times[name].append(seconds)
            reads[name].append(counts)
            print(f"bench_metadata_start: {image.fstype} round {r + 1}/{rounds} {name}: "
                  f"{seconds:.3f} s, {counts[0]} reads charged, {counts[1]} completed",
                  file=sys.stderr)
    return times, reads


def measure(fstype, rounds, iops):
    workdir = tempfile.mkdtemp(prefix="metadata-start-", dir=WORK_DIR)
    image_file, mountpoint = os.path.join(workdir, "fs.img"), os.path.join(workdir, "mnt")
    os.mkdir(mountpoint)
    with open(image_file, "wb") as f:
        f.truncate(512 << 20)
    device = run("losetup", "--find", "--show", "--direct-io=on", image_file).stdout.strip()
    image = Image(device, mountpoint, fstype, None)
    try:
        run(*MKFS[fstype], device)
        mount(image)
        fill(mountpoint)
        cold(image)
        full = os.path.join(workdir, "trace.log")
        run(TRACE, "-q", "-o", full, "-c", f"find {mountpoint} -type f | xargs cat > /dev/null")
        files_only = os.path.join(workdir, "files.log")
        with open(full) as src, open(files_only, "w") as dst:
            dst.writelines(line for line in src if line.split(" ", 2)[1:2] != [device])
        limited = throttle.Cgroup(throttle.Limits(iops, 0, None), [os.stat(device).st_rdev],
                                  "metadata-bench") if iops else contextlib.nullcontext()
        with limited as cgroup:
            times, reads = rounds_of(image._replace(cgroup=cgroup), rounds, full, files_only)
        with open(full) as f:
            records = [line.split(" ", 2)[1] for line in f if not line.startswith("#")]
        return times, reads, sum(1 for p in records if p == device), len(records)
    finally:
        subprocess.run(["umount", mountpoint], capture_output=True)
        subprocess.run(["losetup", "-d", device], capture_output=True)
        subprocess.run(["rm", "-rf", workdir])


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--ext4-options", default="defaults", metavar="OPTS",
                        help="mount options of the ext4 image (say inode_readahead_blks=0: "
                        "then ext4 issues no inode-table readahead, whose single-block "
                        "bios blk-throttle charges one by one before the block layer "
                        "merges them)")
    parser.add_argument("--filesystems", default="ext4,xfs",
                        help="comma-separated, from ext4 and xfs (default both)")
    parser.add_argument("--iops", type=int, default=2000,
                        help="read IOPS limit on the loop device (0: none)")
    args = parser.parse_args()
    filesystems = [f.strip() for f in args.filesystems.split(",")]
    if not filesystems or any(f not in MKFS for f in filesystems):
        sys.exit("bench_metadata_start: --filesystems: give ext4, xfs or both")
    MOUNT_OPTIONS["ext4"] = args.ext4_options
    if os.geteuid() != 0:
        sys.exit("bench_metadata_start: needs root (loop devices, mounts, drop_caches)")
    os.makedirs(WORK_DIR, exist_ok=True)
    lines = ["| filesystem | variant | runs | median time (s) | median × cold, paired by round "
             "| mean × cold (95% CI) | reads charged / completed (median) "
             "| trace records (metadata) |",
             "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for fstype in filesystems:
        times, reads, metadata, records = measure(fstype, args.rounds, args.iops)
        for name, secs in times.items():
            ratios = [s / c for s, c in zip(secs, times["cold"])]
            mean, low, high = mean_ci(ratios)
            interval = "" if name == "cold" else f" ({low:.3f}–{high:.3f})"
            lines.append(f"| {fstype} | {name} | {len(secs)} | {statistics.median(secs):.3f} | "
                         f"{statistics.median(ratios):.3f} | {mean:.3f}{interval} | "
                         f"{statistics.median(c for c, _ in reads[name]):.0f} / "
                         f"{statistics.median(d for _, d in reads[name]):.0f} | "
                         f"{records} ({metadata}) |")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
