#!/usr/bin/env python3
"""replay --throttle: how exactly blk-throttle emulates slow storage, and
the seek model's request-cost and bandwidth part against it. Run as root
by bench/run (make bench) or by hand:

    bench/bench_throttle.py [--dir DIR] [--seconds S] [--repeats N] [--trace T]...

1. Goal: under --throttle riops=N, replay's IOPS is within 5% of N.
   Scattered 4 KiB O_DIRECT reads (replay --no-group) of a file in DIR
   (default /var/tmp: the disk to throttle), N reads/s for S seconds, at
   queue depth 1 and 8, for N = 150, 1500 and 3000 (the profiles' riops).
   IOPS = requests / replay's elapsed_s; the kernel's own count of reads
   in the throttled cgroup (blkio.throttle.io_serviced or io.stat, from
   replay's JSON) is printed beside it.

2. The model: requests of 4 KiB to 1 MiB at random places, each size a
   trace of its own sized to take about S/2 seconds, replayed under each
   --device-profile. pagetrace.model.ThrottleModel predicts each time as
   max(ios / riops, bytes / rbps), with ios the reads the kernel counted
   (a request the block layer splits counts twice), (a) from the profile's
   nominal figures and (b) from riops and rbps fitted to the runs
   (fit_throttle); the goal
   is every prediction within 10% of the measured time. Beside it, the
   linear request + bytes fit of model.fit_runs (kind "ssd"), which adds
   the two costs as a real disk does, and what HDDModel says a 7,200 rpm
   disk would take, to show what the throttle does not emulate.

3. With --trace (start-up traces on the throttled disk), their replays
   under each profile against ThrottleModel's prediction from the plan.

Runs are interleaved (every variant once per round). Prints tables; the
ratio lines start with "ratio:" for bench/run.
"""
import argparse
import json
import math
import os
import pathlib
import random
import statistics
import subprocess
import sys

TOP = pathlib.Path(__file__).resolve().parent.parent
REPLAY = TOP / "replay" / "replay"
PAGE = 4096
sys.path.insert(0, str(TOP / "analysis"))
from pagetrace.analysis import model  # noqa: E402
from pagetrace.core.tracewriter import header, record_line  # noqa: E402
from pagetrace.tools import throttle  # noqa: E402

SIZES = (4096, 16384, 65536, 262144, 1 << 20)


def make_file(path, size):
    if path.exists() and path.stat().st_size == size:
        return
    with open(path, "wb") as f:
        for _ in range(size // (1 << 20)):
            f.write(os.urandom(1 << 20))
        f.flush()
        os.fsync(f.fileno())


def write_trace(trace, data, file_size, size, count, seed):
    """COUNT requests of SIZE bytes at distinct random SIZE-aligned places
    of DATA, as runs of consecutive pages (replay groups each run into one
    request)."""
    slots = random.Random(seed).sample(range(file_size // size), count)
    with open(trace, "w") as f:
        f.write(header(PAGE))
        t = 1_700_000_000_000_000
        for slot in slots:
            for page in range(size // PAGE):
                f.write(record_line(t, data, slot * size + page * PAGE))
                t += 1
    return trace


def replay(trace, *options):
    done = subprocess.run([str(REPLAY), "-q", "-j", *options, str(trace)],
                          capture_output=True, text=True)
    if done.returncode != 0:
        sys.exit(f"bench_throttle: replay failed: {done.stderr.strip()}")
    return json.loads(done.stdout)


def max_bio_bytes(data):
    """The largest bio the disk under DATA takes from an O_DIRECT read of
    separate pages: max_segments pages, or max_sectors_kb."""
    disk = throttle.disk_of(str(data))
    queue = f"/sys/dev/block/{os.major(disk)}:{os.minor(disk)}/queue"
    segments = int(open(f"{queue}/max_segments").read())
    sectors_kb = int(open(f"{queue}/max_sectors_kb").read())
    return min(segments * PAGE, sectors_kb * 1024), throttle.dev_text(disk)


# ---------------------------------------------------------------------------
# 1. riops=N: measured IOPS.

def goal(data, file_size, args, workdir):
    rows = []
    variants = [(n, qd) for n in (150, 1500, 3000) for qd in (1, 8)]
    traces = {n: write_trace(workdir / f"goal-{n}.log", data, file_size, PAGE,
                             int(n * args.seconds), seed=n)
              for n, _ in variants}
    results = {v: [] for v in variants}
    for _ in range(args.repeats):
        for n, qd in variants:
            out = replay(traces[n], "--no-group", "--queue-depth", str(qd),
                         "--throttle", f"riops={n}")
            results[(n, qd)].append(out)
    print(f"1. riops=N: scattered 4 KiB O_DIRECT reads, {args.seconds:g} s each, "
          f"{args.repeats} run(s) per row")
    print(f"{'riops':>6} {'qd':>3} {'reads':>6} {'replay IOPS (runs)':<30} "
          f"{'kernel reads/s':>14} {'IOPS / N':>9}")
    for (n, qd), outs in results.items():
        iops = [o["requests"] / o["elapsed_s"] for o in outs]
        kernel = [o["throttle"]["kernel_reads"] / o["elapsed_s"] for o in outs]
        ratio = statistics.median(iops) / n
        rows.append(((n, qd), ratio))
        print(f"{n:>6} {qd:>3} {outs[0]['requests']:>6} "
              f"{', '.join(f'{x:.1f}' for x in iops):<30} "
              f"{statistics.median(kernel):>14.1f} {ratio:>9.3f}")
        print(f"ratio: replay IOPS / riops, riops={n} qd={qd}: {ratio:.4f}")
    print()
    return rows


# ---------------------------------------------------------------------------
# 2. The model.

def model_runs(data, file_size, args, workdir, bio):
    traces = {}
    for name, p in throttle.PROFILES.items():
        nominal = model.ThrottleModel(p.riops, p.rbps, bio)
        for size in SIZES:
            per_request = nominal.time_s(nominal.ios([size]), size)
            count = min(max(20, int(args.seconds / 2 / per_request)),
                        file_size // size)
            traces[(name, size)] = write_trace(
                workdir / f"model-{name}-{size}.log", data, file_size, size,
                count, seed=size)
    runs = {key: [] for key in traces}
    for _ in range(args.repeats):
        for (name, size), trace in traces.items():
            out = replay(trace, "--device-profile", name)
            runs[(name, size)].append(
                {"requests": out["requests"], "bytes": out["bytes"],
                 "ios": out["throttle"]["kernel_reads"],
                 "split_ios": model.ThrottleModel(1, max_bio_bytes=bio).ios(
                     [size] * out["requests"]),
                 "seeks": out["seeks"], "elapsed_s": out["elapsed_s"]})
    return runs


def check_model(runs, bio):
    print("2. ThrottleModel against replays under each profile (original order, "
          "requests of one size each); ios: reads the kernel counted; if split: "
          f"what they would be if every request were split at {bio} bytes "
          "(max_segments pages)")
    worst = {}
    for name, p in throttle.PROFILES.items():
        mine = [r for (n, _), rs in runs.items() if n == name for r in rs]
        nominal = model.ThrottleModel(p.riops, p.rbps, bio)
        fitted = model.fit_throttle(mine)
        linear = model.fit_runs(mine, kind="ssd")
        hdd = model.HDDModel()
        print(f"\n{name}: nominal riops={p.riops} rbps={p.rbps}; fitted riops="
              f"{fitted.riops:.1f} ({fitted.riops / p.riops:.3f}x) rbps={fitted.rbps:.0f} "
              f"({fitted.rbps / p.rbps:.3f}x)")
        print(f"{'size':>8} {'reqs':>5} {'ios':>5} {'if split':>8} {'measured s':>10} "
              f"{'nominal':>8} {'err':>7} {'fitted':>8} {'err':>7} {'linear':>8} "
              f"{'err':>7} {'7200rpm HDD':>11}")
        errors = {"nominal": [], "fitted": [], "linear": []}
        for (n, size), rs in runs.items():
            if n != name:
                continue
            for r in rs:
                pn = nominal.time_s(r["ios"], r["bytes"])
                pf = fitted.time_s(r["ios"], r["bytes"])
                pl = linear.predict(r)
                # The same requests on a real disk: every one a seek of
                # unknown distance (scattered), plus its transfer.
                ph = hdd.total_s([size] * r["requests"], [True] * r["requests"],
                                 [math.nan] * r["requests"])
                e = [(x - r["elapsed_s"]) / r["elapsed_s"] for x in (pn, pf, pl)]
                for key, value in zip(errors, e):
                    errors[key].append(value)
                print(f"{size:>8} {r['requests']:>5} {r['ios']:>5} {r['split_ios']:>8.0f} "
                      f"{r['elapsed_s']:>10.3f} {pn:>8.3f} {e[0]:>+7.1%} {pf:>8.3f} "
                      f"{e[1]:>+7.1%} {pl:>8.3f} {e[2]:>+7.1%} {ph:>11.3f}")
        for key, values in errors.items():
            worst[(name, key)] = max(abs(v) for v in values)
            print(f"ratio: {name} {key} model, worst |error|: {worst[(name, key)]:.4f}")
    print()
    return worst


# ---------------------------------------------------------------------------
# 3. Start-up traces.

def trace_runs(paths, args):
    if not paths:
        return
    print("3. Start-up traces under each profile: measured against ThrottleModel "
          "(nominal figures, the plan's bytes, the kernel's count of reads)")
    print(f"{'trace':<22} {'profile':<11} {'order':<8} {'reqs':>6} {'ios':>6} "
          f"{'measured s':>10} {'predicted s':>11} {'err':>7}")
    for path in paths:
        plan = subprocess.run([str(REPLAY), "--plan", str(path)], capture_output=True,
                              text=True).stdout.splitlines()[1:]
        lengths = [int(line.rsplit(",", 4)[2]) for line in plan]
        for name, p in throttle.PROFILES.items():
            nominal = model.ThrottleModel(p.riops, p.rbps)
            expected = nominal.total_s(lengths)
            if expected > args.trace_limit:
                print(f"{pathlib.Path(path).name[:22]:<22} {name:<11} skipped: about "
                      f"{expected:.0f} s a run (--trace-limit {args.trace_limit:g})")
                continue
            for order in ([], ["--sorted"]):
                for _ in range(args.trace_repeats):
                    out = replay(path, *order, "--device-profile", name)
                    predicted = nominal.time_s(out["throttle"]["kernel_reads"], out["bytes"])
                    err = (predicted - out["elapsed_s"]) / out["elapsed_s"]
                    print(f"{pathlib.Path(path).name[:22]:<22} {name:<11} "
                          f"{'sorted' if order else 'original':<8} {out['requests']:>6} "
                          f"{out['throttle']['kernel_reads']:>6} {out['elapsed_s']:>10.3f} "
                          f"{predicted:>11.3f} {err:>+7.1%}")
    print()


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dir", type=pathlib.Path, default=pathlib.Path("/var/tmp"),
                        help="where the data file goes: the disk to throttle")
    parser.add_argument("--seconds", type=float, default=8.0,
                        help="length of each goal run (model runs: half)")
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--size-mib", type=int, default=512)
    parser.add_argument("--trace", action="append", default=[],
                        help="a start-up trace whose files are on a block device")
    parser.add_argument("--trace-repeats", type=int, default=1)
    parser.add_argument("--trace-limit", type=float, default=30.0,
                        help="skip a trace under a profile where a run would "
                        "take longer than this many seconds")
    args = parser.parse_args()
    if os.geteuid() != 0:
        sys.exit("bench_throttle: needs root (cgroups)")
    workdir = args.dir / "pagetrace-bench-throttle"
    workdir.mkdir(parents=True, exist_ok=True)
    data = workdir / "data"
    file_size = args.size_mib << 20
    make_file(data, file_size)
    bio, disk = max_bio_bytes(data)
    print(f"data: {data} on disk {disk}, {args.size_mib} MiB; Linux {os.uname().release}; "
          f"cgroup {throttle.find_hierarchy().version}")
    goal(data, file_size, args, workdir)
    check_model(model_runs(data, file_size, args, workdir, bio), bio)
    trace_runs(args.trace, args)
    return 0


def ratio_rows(text):
    """bench/run's rows from this benchmark's output."""
    rows = []
    for line in text.splitlines():
        if not line.startswith("ratio: "):
            continue
        name, value = line[len("ratio: "):].rsplit(": ", 1)
        goal_text = "0.95–1.05" if name.startswith("replay IOPS") else \
            "≤ 0.10" if "nominal" in name or "fitted" in name else ""
        rows.append((f"throttle: {name}", float(value), goal_text))
    return rows


if __name__ == "__main__":
    sys.exit(main())
