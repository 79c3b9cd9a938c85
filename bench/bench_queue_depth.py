#!/usr/bin/env python3
"""replay --queue-depth against fio on scattered 4 KiB reads, run by hand
as root (not part of make test):

    bench/bench_queue_depth.py [--dir DIR] [--zram] [--repeats N]

The same READS distinct 4 KiB pages of one file, at random offsets and in
random order, are read with O_DIRECT twice per run, interleaved:

* `replay --no-group --queue-depth DEPTH` (DEPTH threads doing pread), from
  a format 1 trace of those pages;
* `fio --ioengine=io_uring --iodepth=DEPTH --direct=1`, replaying an fio
  version 2 iolog of the same pages in the same order (`--read_iolog`,
  `--replay_no_stall`).

IOPS are reads / elapsed time: replay's `elapsed_s` from --json, fio's job
runtime. --dir is on the disk to measure (default: /var/tmp, the VM's
virtio disk); --zram also measures a file on a fresh zram device (ext4),
which is removed afterwards. Prints one row per run and a summary.
"""
import argparse
import json
import os
import pathlib
import random
import shutil
import statistics
import subprocess
import sys
import tempfile

TOP = pathlib.Path(__file__).resolve().parent.parent
REPLAY = TOP / "replay" / "replay"
PAGE = 4096
sys.path.insert(0, str(TOP / "analysis"))
from pagetrace.core.tracewriter import header, record_line  # noqa: E402


def make_file(path, size):
    """SIZE bytes of random data, on disk (fsync'd)."""
    with open(path, "wb") as f:
        for _ in range(size // (1 << 20)):
            f.write(os.urandom(1 << 20))
        f.flush()
        os.fsync(f.fileno())


def write_inputs(path, offsets, workdir):
    """The replay trace and the fio iolog of OFFSETS, in that order."""
    trace = workdir / "reads.log"
    with open(trace, "w") as f:
        f.write(header(PAGE))
        for i, off in enumerate(offsets):
            f.write(record_line(1_700_000_000_000_000 + i, str(path), off))
    iolog = workdir / "reads.iolog"
    with open(iolog, "w") as f:
        f.write(f"fio version 2 iolog\n{path} add\n{path} open\n")
        for off in offsets:
            f.write(f"{path} read {off} {PAGE}\n")
        f.write(f"{path} close\n")
    return trace, iolog


def run_replay(trace, depth):
    out = subprocess.run([str(REPLAY), "--json", "--quiet", "--no-group",
                          "--queue-depth", str(depth), str(trace)],
                         capture_output=True, text=True, check=True)
    result = json.loads(out.stdout)
    return result["requests"] / result["elapsed_s"]


def run_fio(iolog, depth, reads):
    out = subprocess.run(["fio", "--name=scattered", f"--read_iolog={iolog}",
                          "--ioengine=io_uring", f"--iodepth={depth}",
                          "--direct=1", "--replay_no_stall=1",
                          "--output-format=json"],
                         capture_output=True, text=True, check=True)
    job = json.loads(out.stdout)["jobs"][0]["read"]
    if job["total_ios"] != reads:
        sys.exit(f"bench_queue_depth: fio did {job['total_ios']} reads, "
                 f"not {reads}")
    return job["total_ios"] / (job["runtime"] / 1000.0)


def measure(label, directory, args):
    path = os.path.join(directory, "qd-bench.data")
    size = args.size_mib << 20
    make_file(path, size)
    offsets = [p * PAGE for p in
               random.Random(args.seed).sample(range(size // PAGE),
                                               args.reads)]
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        trace, iolog = write_inputs(path, offsets, pathlib.Path(tmp))
        for run in range(args.repeats):
            replay_iops = run_replay(trace, args.depth)
            fio_iops = run_fio(iolog, args.depth, args.reads)
            rows.append((replay_iops, fio_iops))
            print(f"{label} run {run + 1}: replay {replay_iops:,.0f} IOPS, "
                  f"fio {fio_iops:,.0f} IOPS, ratio "
                  f"{replay_iops / fio_iops:.2f}", flush=True)
    os.unlink(path)
    ratios = [r / f for r, f in rows]
    print(f"{label}: replay {min(r for r, _ in rows):,.0f}-"
          f"{max(r for r, _ in rows):,.0f} IOPS, fio "
          f"{min(f for _, f in rows):,.0f}-{max(f for _, f in rows):,.0f} "
          f"IOPS, ratio {min(ratios):.2f}-{max(ratios):.2f} "
          f"(median {statistics.median(ratios):.2f})", flush=True)


class Zram:
    """A fresh zram device with ext4, mounted; removed on exit."""

    def __init__(self, size_mib):
        self.size_mib = size_mib
        self.device = self.mnt = None

    def __enter__(self):
        if shutil.which("modprobe"):
            subprocess.run(["modprobe", "zram"], check=False)
        self.device = subprocess.run(
            ["zramctl", "--find", "--size", f"{self.size_mib + 256}M"],
            capture_output=True, text=True, check=True).stdout.strip()
        subprocess.run(["mkfs.ext4", "-q", "-F", self.device], check=True)
        self.mnt = tempfile.mkdtemp(prefix="qd-zram-")
        subprocess.run(["mount", self.device, self.mnt], check=True)
        return self.mnt

    def __exit__(self, *exc):
        subprocess.run(["umount", self.mnt], check=False)
        os.rmdir(self.mnt)
        subprocess.run(["zramctl", "--reset", self.device], check=False)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dir", default="/var/tmp",
                        help="a directory on the disk to measure")
    parser.add_argument("--zram", action="store_true",
                        help="also measure on a fresh zram device")
    parser.add_argument("--size-mib", type=int, default=1024,
                        help="size of the file read (default 1024)")
    parser.add_argument("--reads", type=int, default=32768)
    parser.add_argument("--depth", type=int, default=32)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    if os.geteuid() != 0:
        sys.exit("bench_queue_depth: run as root")
    if not REPLAY.exists():
        sys.exit(f"bench_queue_depth: no {REPLAY}: run make -C replay")
    dev = os.stat(args.dir).st_dev
    print(f"{args.reads} distinct 4 KiB reads at random offsets of a "
          f"{args.size_mib} MiB file, depth {args.depth}, "
          f"{args.repeats} runs each", flush=True)
    measure(f"{args.dir} ({os.major(dev)}:{os.minor(dev)})", args.dir, args)
    if args.zram:
        with Zram(args.size_mib) as mnt:
            measure("zram", mnt, args)


if __name__ == "__main__":
    main()
