#!/usr/bin/env python3
"""The seek-cost model (analysis/pagetrace/analysis/model.py) fitted to replays on
diskemu's emulated disk, whose parameters are known. Run as root:

    bench/bench_seek_model.py [--dir DIR] [--profile NAME] [--reads N]
                              [--rounds R]

A sparse image the size of the whole disk under diskemu; traces of reads
of its device node (metadata records: replay reads them with O_DIRECT at
those offsets, so offsets are disk positions), replayed one after the
other at queue depth 1 (replay at real-time priority, like the daemon's
serving thread), R rounds:

- sequential 4 KiB reads (the drive's read-ahead buffer serves them): the
  per-request cost, host path included;
- a sequential 128 MiB read in 1 MiB requests 1 GiB into the disk: the
  media rate of the first zone;
- N random 4 KiB reads over spans of 0.1 GB to the whole disk, each
  read's latency from replay --latencies: model.fit_hdd_latencies finds
  the seek curve as the lower envelope of latency against distance and
  the revolution from the spread above it (a read's rotational wait is
  uniform over one revolution, its seek fixed by the distance), the
  boundary's place (the profile's) fixed; reads within 16 MiB of the head
  are left out (the drive's buffer may serve them). model.fit_hdd on the
  runs' totals is shown beside it: totals give only the sum of seek and
  rotation;
- unseen: N random 64 KiB reads over the first 5% of the disk, predicted
  by the fitted model and by the profile's own figures.

Goals: average seek, rotational latency and the media rate within 10% of
the profile's; the unseen trace's replay time within 10% of the
prediction. Lines "ratio: ..." for
bench/run.
"""
import argparse
import csv
import json
import os
import pathlib
import random
import subprocess
import sys
import tempfile

import numpy as np

TOP = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(TOP / "analysis"))
from pagetrace.analysis import model  # noqa: E402
from pagetrace.tools import diskemu  # noqa: E402

REPLAY = TOP / "replay" / "replay"
PAGE = 4096
SPANS = (1e8, 1e9, 1e10, 1e11, 3e11, 1.0)   # 1.0: the whole disk
# Reads this close to the head may come from the drive's read-ahead buffer
# (no seek, no rotational wait) on any drive of the era (2-32 MiB caches):
# left out of the per-read fit.
NEAR_HEAD = 16 << 20


def write_trace(path, device, offsets, pages_each=1):
    with open(path, "w") as f:
        f.write("# pagetrace-format: 1\n# page-size: 4096\n")
        t = 1_700_000_000_000_000
        for off in offsets:
            for p in range(pages_each):
                f.write(f"{t} {device} {off + p * PAGE}\n")
                t += 1
    return path


def replay(trace, *options):
    # At real-time priority, as diskemu's serving thread: what is fitted
    # is the disk, not how long a busy machine keeps replay from a
    # completed read (bench_diskemu.py does the same for fio).
    out = subprocess.run(["chrt", "-f", "20", str(REPLAY), "-q", "-j",
                          *options, str(trace)],
                         capture_output=True, text=True, check=True)
    return json.loads(out.stdout)


class Disk:
    """Runs traces on the emulated disk and keeps the head's place."""

    def __init__(self, device, work):
        self.device, self.work, self.head, self.n = device, work, None, 0

    def run(self, offsets, length, options=()):
        self.n += 1
        trace = write_trace(os.path.join(self.work, f"t{self.n}.log"),
                            self.device, offsets, length // PAGE)
        latencies = os.path.join(self.work, f"t{self.n}.csv")
        out = replay(trace, "--latencies", latencies, *options)
        with open(latencies) as f:
            rows = list(csv.DictReader(f))
        out["latencies_s"] = np.array([int(r["latency_ns"]) / 1e9
                                       for r in rows])
        out["lengths"] = np.array([int(r["bytes"]) for r in rows])
        starts = np.array(offsets, dtype=float)
        ends = starts + length
        before = np.concatenate([[self.head if self.head is not None
                                  else starts[0]], ends[:-1]])
        self.head = ends[-1]
        out["distances"] = np.abs(starts - before)
        return out


def random_offsets(rng, span, n, length):
    return [rng.randrange(0, int(span) // length) * length for _ in range(n)]


def one_round(disk, profile, rng, n):
    cap = profile["capacity"]
    seq4k = disk.run(list(range(0, 4000 * PAGE, PAGE)), PAGE, ["--no-group"])
    seq1m = disk.run([1 << 30], 128 << 20)
    rand = [disk.run(random_offsets(rng, s if s > 1 else cap, n, PAGE), PAGE,
                     ["--no-group"]) for s in SPANS]
    unseen = disk.run(random_offsets(rng, 0.05 * cap, n, 65536), 65536)
    return seq4k, seq1m, rand, unseen


def predict(m, run, per_request_s):
    seeks = run["distances"] > 0
    ms = m.seek_ms(run["distances"]) + np.where(seeks,
                                                m.rotational_latency_ms, 0)
    return (run["requests"] * per_request_s + ms.sum() / 1e3
            + run["bytes"] / m.transfer_bytes_per_s)


def ratio_rows(text):
    """bench/run's rows from this benchmark's output."""
    return [(name, float(value), "0.90–1.10")
            for name, value in (line[len("ratio: "):].rsplit(": ", 1)
                                for line in text.splitlines()
                                if line.startswith("ratio: "))]


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dir", default="/var/tmp/pagetrace-bench")
    ap.add_argument("--profile", default="hdd-7200")
    ap.add_argument("--reads", type=int, default=250)
    ap.add_argument("--rounds", type=int, default=2)
    args = ap.parse_args()
    profile = diskemu.load_profiles()[args.profile]
    nominal = model.HDDModel(**diskemu.hdd_model_params(profile))
    rng = random.Random(1)
    os.makedirs(args.dir, exist_ok=True)
    rounds = []
    with tempfile.TemporaryDirectory(dir=args.dir) as work:
        image = os.path.join(work, "whole.img")
        with open(image, "wb") as f:
            f.truncate(int(profile["capacity"]) // PAGE * PAGE)
        with diskemu.EmulatedDisk(image, args.profile) as emu:
            disk = Disk(emu.device, work)
            for i in range(args.rounds):
                print(f"round {i + 1}", file=sys.stderr, flush=True)
                rounds.append(one_round(disk, profile, rng, args.reads))
    per_request = float(np.mean([r[0]["elapsed_s"] / r[0]["requests"]
                                 for r in rounds]))
    rate = float(np.mean([r[1]["bytes"] / r[1]["elapsed_s"] for r in rounds]))
    runs = []
    for r in rounds:
        for run in r[2]:
            run.update(per_request_s=per_request, bytes_per_s=rate)
            runs.append(run)
    fitted, fit = model.fit_hdd(runs, profile["capacity"],
                                profile["boundary_fraction"])
    rotation = diskemu.rotation_ms(profile)
    for run in runs:
        if len(run["latencies_s"]) != len(run["distances"]):
            sys.exit("bench_seek_model: a replay lost reads: "
                     f"{len(run['latencies_s'])} of {len(run['distances'])}")
    by_read, lat_fit = model.fit_hdd_latencies(
        np.concatenate([r["distances"] for r in runs]),
        np.concatenate([r["latencies_s"] for r in runs]),
        np.concatenate([r["lengths"] for r in runs]), profile["capacity"],
        per_request, rate, profile["boundary_fraction"],
        min_distance_bytes=NEAR_HEAD)
    print(f"profile {args.profile}; {args.rounds} rounds of {len(SPANS)} "
          f"random runs of {args.reads} reads; machine "
          f"{os.uname().release}, {os.cpu_count()} CPUs")
    print(f"per-request cost (sequential 4 KiB, buffered): "
          f"{per_request * 1e3:.3f} ms; {lat_fit.reads} reads fitted "
          f"(those over {NEAR_HEAD >> 20} MiB from the head)")
    access = model.mean_seek_ms(fitted) + fitted.rotational_latency_ms
    rows = [("average seek, each read's latency (ms)",
             model.mean_seek_ms(by_read), profile["avg_seek_ms"], True),
            ("rotational latency, each read's latency (ms)",
             by_read.rotational_latency_ms, rotation, True),
            ("media rate, first zone (MB/s)", rate / 1e6,
             profile["outer_MBps"], True),
            ("track-to-track, each read's latency (ms)",
             by_read.track_to_track_ms, profile["t2t_ms"], False),
            ("full stroke, each read's latency (ms)",
             by_read.full_stroke_ms, profile["full_ms"], False),
            ("average seek + rotational latency, totals (ms)", access,
             profile["avg_seek_ms"] + rotation, False)]
    print(f"{'parameter':<50}{'fitted':>10}{'profile':>10}{'ratio':>8}")
    for name, got, want, _ in rows:
        print(f"{name:<50}{got:>10.3f}{want:>10.3f}{got / want:>8.3f}")
    for name, got, want, goal in rows:
        if goal:
            print(f"ratio: seek model fitted {name.split(' (')[0]} / "
                  f"profile: {got / want:.3f}")
    print(f"fit: rms error {fit.rms_error_s:.3f} s, largest "
          f"{fit.max_relative_error:.1%} of a run")
    for i, r in enumerate(rounds):
        unseen = r[3]
        got = predict(by_read, unseen, per_request)
        totals = predict(fitted, unseen, per_request)
        nom = predict(nominal, unseen, per_request)
        print(f"unseen trace, round {i + 1} ({unseen['requests']} random "
              f"64 KiB reads over 5% of the disk): measured "
              f"{unseen['elapsed_s']:.3f} s, model from each read's latency "
              f"{got:.3f} s ({got / unseen['elapsed_s']:.3f}), from totals "
              f"{totals:.3f} s ({totals / unseen['elapsed_s']:.3f}), "
              f"profile's figures {nom:.3f} s "
              f"({nom / unseen['elapsed_s']:.3f})")
        print(f"ratio: seek model prediction / measured, unseen trace, "
              f"round {i + 1}: {got / unseen['elapsed_s']:.3f}")

if __name__ == "__main__":
    main()
