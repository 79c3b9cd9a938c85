#!/usr/bin/env python3
"""Benchmark: how fast pagetrace.read_trace reads a large trace.

Writes a synthetic trace of --records records (10 million by default; the
generator is pagetrace.synth, seeded, so the file is the same every time),
then reads it --repeat times, each in a fresh process so that peak memory
(ru_maxrss) is the reader's alone. Prints records/s and peak RSS per run,
and the best run.

    .venv/bin/python bench/bench_analysis.py [--records N] [--trace PATH]

Not run by the tests (it takes about a minute and 600 MB of disk).
"""
import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time


def measure(path, engine):
    """Child process: read the trace once, print one JSON line."""
    import pagetrace
    baseline_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    start = time.perf_counter()
    frame = pagetrace.read_trace(path, engine=engine)
    seconds = time.perf_counter() - start
    peak_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    print(json.dumps({"records": len(frame), "seconds": seconds,
                      "engine": frame.attrs["engine"],
                      "peak_rss_mib": peak_kib / 1024,
                      "baseline_rss_mib": baseline_kib / 1024,
                      "frame_mib": frame.memory_usage(deep=True).sum() / 2**20}))


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=10_000_000)
    parser.add_argument("--trace", help="trace to read (written if missing; "
                        "default: a temporary file, removed afterwards)")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--engine", default="auto",
                        choices=("auto", "arrow", "python"))
    parser.add_argument("--measure", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.measure:
        measure(args.measure, args.engine)
        return 0

    from pagetrace.synth import write_synthetic_trace
    keep = args.trace is not None
    path = args.trace or os.path.join(tempfile.gettempdir(),
                                      f"pagetrace-bench-{os.getpid()}.log")
    try:
        if not os.path.exists(path):
            start = time.perf_counter()
            write_synthetic_trace(path, args.records)
            print(f"wrote {args.records:,} records ({os.path.getsize(path) / 2**20:,.0f} MiB) "
                  f"to {path} in {time.perf_counter() - start:.1f} s")
        runs = []
        for _ in range(args.repeat):
            child = subprocess.run(
                [sys.executable, __file__, "--measure", path,
                 "--engine", args.engine],
                capture_output=True, text=True, check=True)
            run = json.loads(child.stdout)
            run["records_per_s"] = run["records"] / run["seconds"]
            runs.append(run)
            print(f"{run['records']:,} records in {run['seconds']:.2f} s: "
                  f"{run['records_per_s'] / 1e6:.2f} M records/s, engine "
                  f"{run['engine']}, peak RSS {run['peak_rss_mib']:,.0f} MiB "
                  f"(interpreter and imports {run['baseline_rss_mib']:,.0f} MiB,"
                  f" DataFrame {run['frame_mib']:,.0f} MiB)")
        best = max(runs, key=lambda r: r["records_per_s"])
        print(f"best: {best['records_per_s'] / 1e6:.2f} M records/s "
              f"(target: 2 M records/s); cpus: {os.cpu_count()}")
    finally:
        if not keep and os.path.exists(path):
            os.remove(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
