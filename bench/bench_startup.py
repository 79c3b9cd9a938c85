#!/usr/bin/env python3
"""Start-up prefetch on firefox-esr: what share of the start-up's I/O cost
(selectively cold minus hot) each prefetch state recovers (issue 9's goal:
the best one at least 75%).

Runs scripts/firefox-case (trace --used of a cold start, pagetrace waste,
cachetop of a cold and a warm start, four more traces --used recorded with
the disk's read_ahead_kb at 0 for the lists of used pages, then
startup-bench with the states selective, hot, prefetched-used, concurrent,
prefetched-merged and concurrent-merged interleaved) and prints its figures
and summary. Prints one line saying so and exits 0 when
firefox-esr is not installed: the benchmark needs the real application.

USAGE
  sudo .venv/bin/python bench/bench_startup.py [-n RUNS] [--dir DIR]

EXAMPLES
  sudo .venv/bin/python bench/bench_startup.py -n 10
  sudo .venv/bin/python bench/bench_startup.py -n 3 --dir /var/tmp/ff
"""
import argparse
import pathlib
import re
import shutil
import subprocess
import sys

TOP = pathlib.Path(__file__).resolve().parent.parent
STATES = "selective,hot,prefetched-used,concurrent,prefetched-merged,concurrent-merged"
USED_RUNS = "4"
# `concurrent (total) vs selective: ...; recovers 81% of the I/O cost (...`
GAIN = re.compile(r"^(\S+) \(total\) vs selective: .*; recovers (-?\d+)% of the I/O cost "
                  r"\(95% CI (.*?)\)", re.M)


def ratio_rows(text):
    """(measure, value, goal) rows for bench/run's table: the share of the
    I/O cost each prefetch state recovered."""
    return [(f"firefox-esr start-up: share of the I/O cost recovered by {state} "
             f"(95% CI {interval})", int(percent) / 100, "≥ 0.75 (best state)")
            for state, percent, interval in GAIN.findall(text)]


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     epilog=__doc__[__doc__.index("USAGE"):],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("-n", "--runs", type=int, default=10, help="runs per state (default 10)")
    parser.add_argument("--dir", default="/var/tmp/pagetrace-bench/firefox-case",
                        help="firefox-case's output directory")
    args = parser.parse_args()
    if not shutil.which("firefox-esr"):
        print("firefox-esr is not installed: start-up prefetch benchmark skipped")
        return 0
    out = pathlib.Path(args.dir)
    done = subprocess.run([TOP / "scripts" / "firefox-case", "--no-install", "-o", out,
                           "-n", str(args.runs), "--used-readahead", "0",
                           "--used-runs", USED_RUNS, "--states", STATES],
                          capture_output=True, text=True)
    summary = out / "summary.txt"
    # Status 1 is a failed or timed-out run, which the summary counts; any
    # other failure leaves nothing to report.
    if done.returncode not in (0, 1) or not summary.exists():
        sys.exit(f"bench_startup: firefox-case failed ({done.returncode}):\n"
                 f"{done.stderr[-3000:]}")
    print(f"firefox-case -n {args.runs} --used-readahead 0 --used-runs {USED_RUNS} "
          f"--states {STATES}\n")
    print((out / "machine.txt").read_text())
    print((out / "figures.txt").read_text())
    print(summary.read_text())
    return 0


if __name__ == "__main__":
    sys.exit(main())
