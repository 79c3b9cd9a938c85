#!/usr/bin/env python3
"""Pilot rounds for the launch (issue 22): variants of one start-up run
side by side with selective and hot, in a random order each round, so that
they share the machine's noise; each variant's share of the round's I/O
cost (selective - hot), by the mean. What docs/case-study-firefox.md
("2026-11-27") compares launch variants with; startup-bench is what
measures the states users deploy (bench_launch.py).

selective: the files of TRACE evicted (pagetrace cache evict's code);
hot: the same files read into the cache first. A variant is a shell
command in which APP stands for the start-up command ($APP); it runs
after the same eviction as selective.

USAGE
  sudo .venv/bin/python bench/launch_variants.py TRACE ROUNDS VARIANTS.json

EXAMPLES
  export APP="firefox-esr --headless --no-remote --profile $D/profile --screenshot $D/s.png about:blank"
  echo '{"launch": "launch/launch -q $D/app.pack -- APP",
         "launch-w512K": "launch/launch -q --window 512K $D/app.pack -- APP"}' > v.json
  sudo -E .venv/bin/python bench/launch_variants.py $D/cold.log 12 v.json
"""
import json
import os
import pathlib
import random
import statistics
import subprocess
import sys
import time

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent.parent / "analysis"))
from pagetrace.tools import pagecache  # noqa: E402

BASELINES = ("selective", "hot")


def run_round(variants, paths, method, times, app):
    order = list(variants) + list(BASELINES)
    random.shuffle(order)
    for name in order:
        if name == "hot":
            pagecache.warm_files(paths, method)
        else:
            pagecache.evict_files(paths, method)
        time.sleep(0.2)
        command = app if name in BASELINES else variants[name].replace("APP", app)
        started = time.perf_counter()
        done = subprocess.run(command, shell=True, stdout=subprocess.DEVNULL,
                              stderr=subprocess.PIPE)
        times[name].append(time.perf_counter() - started)
        if done.returncode:
            print(f"{name}: exit status {done.returncode}: "
                  f"{done.stderr.decode(errors='replace')[-200:]}", file=sys.stderr)


def main():
    if len(sys.argv) != 4 or "APP" not in os.environ:
        sys.exit(__doc__[__doc__.index("USAGE"):])
    trace, rounds = sys.argv[1], int(sys.argv[2])
    with open(sys.argv[3]) as f:
        variants = json.load(f)
    paths, _ = pagecache.collect_files(list(pagecache.read_trace(trace).pages))
    method = pagecache.choose_method()[0]
    times = {name: [] for name in list(variants) + list(BASELINES)}
    for number in range(rounds):
        run_round(variants, paths, method, times, os.environ["APP"])
        print(f"round {number + 1}/{rounds}", file=sys.stderr, flush=True)
    selective, hot = (statistics.mean(times[b]) for b in BASELINES)
    print(f"load average {os.getloadavg()[0]:.2f}; selective {selective:.3f} s, "
          f"hot {hot:.3f} s, I/O cost {selective - hot:.3f} s, {rounds} rounds")
    for name, runs in times.items():
        mean = statistics.mean(runs)
        print(f"{name:24s} mean {mean:.3f} s  median {statistics.median(runs):.3f} s  "
              f"recovers {(selective - mean) / (selective - hot) * 100:4.0f}% of the I/O cost")
    return 0


if __name__ == "__main__":
    sys.exit(main())
