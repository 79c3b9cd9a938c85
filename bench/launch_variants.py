#!/usr/bin/env python3
"""Pilot rounds for the launch (issue 22): variants of one start-up run
side by side with selective and hot, in a random order each round, so that
they share the machine's noise; each variant's share of the round's I/O
cost (selective - hot), by the mean. What docs/lab/case-study-firefox.md
("2026-11-27") compares launch variants with; startup-bench is what
measures the states users deploy (bench_launch.py).

selective: the files of TRACE evicted (pagetrace cache evict's code);
hot: the same files read into the cache first. A variant is a shell
command in which APP stands for the start-up command ($APP); it runs
after the same eviction as selective.

USAGE
  sudo .venv/bin/python bench/launch_variants.py [--device-profile NAME] TRACE ROUNDS VARIANTS.json

With --device-profile (cloud-3000, hdd-150, ...: pagetrace.tools.throttle)
every state runs in a cgroup with the profile's blk-throttle read limits
on the disks of TRACE's files; the eviction and the warming do not.

EXAMPLES
  export APP="firefox-esr --headless --no-remote --profile $D/profile --screenshot $D/s.png about:blank"
  echo '{"launch": "launch/launch -q $D/app.pack -- APP",
         "launch-w512K": "launch/launch -q --window 512K $D/app.pack -- APP"}' > v.json
  sudo -E .venv/bin/python bench/launch_variants.py $D/cold.log 12 v.json
  sudo -E .venv/bin/python bench/launch_variants.py --device-profile cloud-3000 $D/cold.log 6 v.json
"""
import contextlib
import json
import os
import pathlib
import random
import statistics
import subprocess
import sys
import time

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent.parent / "analysis"))
from pagetrace.tools import pagecache, throttle  # noqa: E402

BASELINES = ("selective", "hot")


def run_round(variants, paths, method, times, app, cgroup=None):
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
        with cgroup.spawning() if cgroup else contextlib.nullcontext():
            done = subprocess.Popen(command, shell=True, stdout=subprocess.DEVNULL,
                                    stderr=subprocess.PIPE)
        stderr = done.communicate()[1]
        times[name].append(time.perf_counter() - started)
        if done.returncode:
            print(f"{name}: exit status {done.returncode}: "
                  f"{stderr.decode(errors='replace')[-200:]}", file=sys.stderr)


def main():
    args = sys.argv[1:]
    profile = None
    if len(args) == 5 and args[0] == "--device-profile":
        profile, args = args[1], args[2:]
    if len(args) != 3 or "APP" not in os.environ:
        sys.exit(__doc__[__doc__.index("USAGE"):])
    trace, rounds = args[0], int(args[1])
    with open(args[2]) as f:
        variants = json.load(f)
    paths, _ = pagecache.collect_files(list(pagecache.read_trace(trace).pages))
    method = pagecache.choose_method()[0]
    times = {name: [] for name in list(variants) + list(BASELINES)}
    with (throttle.Cgroup(throttle.profile_limits(profile), throttle.disks_of(paths),
                          "launch-variants") if profile else contextlib.nullcontext()) as cgroup:
        for number in range(rounds):
            run_round(variants, paths, method, times, os.environ["APP"], cgroup)
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
