#!/usr/bin/env python3
"""diskemu against its own model, with fio. Run as root by bench/run
(make bench) or by hand:

    bench/bench_diskemu.py [--dir DIR] [--seconds S] [--profile NAME]...
                           [--plot PNG]

For each profile, a sparse image the size of the whole disk in DIR
(default /var/tmp/pagetrace-bench) under diskemu, then fio on its loop
device (O_DIRECT, psync, queue depth 1, fio at real-time priority
like the daemon's serving thread):

1. Random 4 KiB reads for S seconds: IOPS against the model's
   (diskemu --predict: overhead + mean seek over random pairs + half a
   revolution + transfer). Goal: within 5%.
2. Sequential 1 MiB reads for S/2 seconds in the first zone and in the
   zone at half the disk: MB/s against that zone's rate. Goal: within 5%.
3. Latency against seek distance: fio's per-read latency log with offsets
   (log_offset=1) of run 1, distance = |offset - previous end|, plotted
   (--plot) with the profile's curve: seek(distance) + transfer +
   overhead (no rotation: the floor), + half a revolution (the mean) and
   + a whole one (the ceiling). Binned means against the mean curve are
   printed.

Prints tables; the ratio lines start with "ratio:" for bench/run.
"""
import argparse
import json
import os
import pathlib
import statistics
import subprocess
import sys
import tempfile

TOP = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(TOP / "analysis"))
from pagetrace.tools import diskemu  # noqa: E402

MIB = 1 << 20


def fio(device, seconds, rw, bs, offset=0, lat_prefix=None):
    # At real-time priority, as the daemon's serving thread: the check is
    # of the emulator, not of how long a busy machine's run queue keeps
    # fio from its completed read.
    argv = ["chrt", "-f", "20", "fio", "--name=check", f"--filename={device}", "--direct=1",
            "--ioengine=psync", "--iodepth=1", f"--rw={rw}", f"--bs={bs}",
            f"--offset={offset}", f"--runtime={seconds}", "--time_based",
            "--output-format=json"]
    if lat_prefix:
        argv += [f"--write_lat_log={lat_prefix}", "--log_offset=1"]
    out = subprocess.run(argv, capture_output=True, text=True, check=True)
    return json.loads(out.stdout)["jobs"][0]["read"]


def latency_points(prefix):
    """(distance bytes, latency ms) of each read after the first, from
    fio's clat log: time ms, latency ns, direction, size, offset."""
    rows = []
    with open(f"{prefix}_clat.1.log") as f:
        for line in f:
            _, lat, _, size, offset = (int(x) for x in line.split(",")[:5])
            rows.append((offset, size, lat / 1e6))
    return [(abs(off - (prev_off + prev_size)), lat)
            for (prev_off, prev_size, _), (off, _, lat)
            in zip(rows, rows[1:])]


def binned(points, profile, curve, bins=10):
    """Mean measured latency and the model's mean per distance decile."""
    points = sorted(points)
    size = len(points) // bins
    rows = []
    for i in range(bins):
        chunk = points[i * size:(i + 1) * size]
        d = statistics.mean(p[0] for p in chunk)
        model = statistics.mean(
            curve.ms(p[0]) for p in chunk) + diskemu.rotation_ms(profile) \
            + profile["overhead_ms"] + 4096 / profile["outer_MBps"] / 1e3
        rows.append((d, statistics.mean(p[1] for p in chunk), model))
    return rows


def plot(results, path):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, axes = plt.subplots(1, len(results), figsize=(6 * len(results), 4.5),
                             squeeze=False)
    for ax, (name, profile, points) in zip(axes[0], results):
        curve = diskemu.SeekCurve(profile)
        cap = profile["capacity"]
        xs = [cap * i / 400 for i in range(1, 401)]
        base = [curve.ms(x) + profile["overhead_ms"] for x in xs]
        rev = 2 * diskemu.rotation_ms(profile)
        ax.scatter([p[0] / 1e9 for p in points], [p[1] for p in points],
                   s=3, alpha=0.4, label="fio: each 4 KiB read")
        for extra, style, label in ((0, "k-", "seek (no rotation)"),
                                    (rev / 2, "r--", "+ half a revolution"),
                                    (rev, "k:", "+ a whole revolution")):
            ax.plot([x / 1e9 for x in xs], [b + extra for b in base], style,
                    label=label)
        top = (profile["full_ms"] + rev) * 1.5
        above = sum(p[1] > top for p in points)
        ax.set_ylim(0, top)
        ax.set_title(f"diskemu {name}: latency against seek distance\n"
                     f"({len(points)} reads, {above} above {top:.0f} ms "
                     "not shown)", fontsize=10)
        ax.set_xlabel("seek distance (GB)")
        ax.set_ylabel("read latency (ms)")
        ax.legend(fontsize=8, loc="lower right")
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def daemon_ms(log):
    """Mean time each read spent in the daemon (arrival to completion)."""
    import csv
    with open(log) as f:
        rows = list(csv.DictReader(f))
    return statistics.mean(float(r["done_s"]) - float(r["arrival_s"])
                           for r in rows) * 1e3


def zone_middle(profile, zone):
    return int((zone + 0.5) / profile["zones"] * profile["capacity"]) \
        // MIB * MIB


def check(name, profile, workdir, seconds):
    image = os.path.join(workdir, f"diskemu-{name}.img")
    with open(image, "wb") as f:
        f.truncate(int(profile["capacity"]) // 4096 * 4096)
    pred = diskemu.predict(image, name)
    prefix = os.path.join(workdir, f"lat-{name}")
    log = os.path.join(workdir, f"requests-{name}.csv")
    with diskemu.EmulatedDisk(image, name, log=log) as disk:
        rand = fio(disk.device, seconds, "randread", "4k",
                   lat_prefix=prefix)
    with diskemu.EmulatedDisk(image, name) as disk:
        seq = [(offset, fio(disk.device, max(seconds // 2, 2), "read", "1m",
                            offset=offset))
               for offset in (0, zone_middle(profile, profile["zones"] // 2))]
    os.unlink(image)
    iops = rand["iops"]
    path_ms = rand["clat_ns"]["mean"] / 1e6 - daemon_ms(log)
    print(f"{name}: random 4 KiB QD1: {iops:.2f} IOPS ({rand['total_ios']} "
          f"reads), model {pred['random_4k_iops']:.2f}: "
          f"{iops / pred['random_4k_iops']:.3f}x; the emulator's path "
          f"(fio's latency - the daemon's) {path_ms:.3f} ms a read")
    print(f"ratio: diskemu {name} random 4 KiB IOPS / model: "
          f"{iops / pred['random_4k_iops']:.3f}")
    for offset, r in seq:
        rate = diskemu.zone_rate(profile, offset)
        print(f"{name}: sequential 1 MiB at {offset / 1e9:.0f} GB: "
              f"{r['bw_bytes'] / 1e6:.1f} MB/s, zone rate {rate / 1e6:.1f}:"
              f" {r['bw_bytes'] / rate:.3f}x")
        print(f"ratio: diskemu {name} sequential at {offset / 1e9:.0f} GB / "
              f"zone rate: {r['bw_bytes'] / rate:.3f}")
    points = latency_points(prefix)
    curve = diskemu.SeekCurve(profile)
    print(f"{name}: latency by seek distance (deciles): distance GB, "
          "measured ms, model mean ms")
    for d, measured, model in binned(points, profile, curve):
        print(f"  {d / 1e9:8.1f} {measured:8.2f} {model:8.2f}")
    return points


def ratio_rows(text):
    """bench/run's rows from this benchmark's output."""
    rows = []
    for line in text.splitlines():
        if line.startswith("ratio: "):
            name, value = line[len("ratio: "):].rsplit(": ", 1)
            rows.append((name, float(value), "0.95–1.05"))
    return rows


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dir", default="/var/tmp/pagetrace-bench")
    ap.add_argument("--seconds", type=int, default=30)
    ap.add_argument("--profile", action="append")
    ap.add_argument("--plot", metavar="PNG")
    args = ap.parse_args()
    os.makedirs(args.dir, exist_ok=True)
    profiles = diskemu.load_profiles()
    names = args.profile or list(profiles)
    print(f"machine: {os.uname().release}, {os.cpu_count()} CPUs")
    results = []
    with tempfile.TemporaryDirectory(dir=args.dir) as work:
        for name in names:
            points = check(name, profiles[name], work, args.seconds)
            results.append((name, profiles[name], points))
    if args.plot:
        plot(results, args.plot)


if __name__ == "__main__":
    main()
