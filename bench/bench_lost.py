#!/usr/bin/env python3
"""Lost events in cold application starts under `trace --used`.

Each round drops the page cache (sync, then drop_caches 3) and starts the
application once under `trace --used -x -q`, with a fresh profile made by
one untraced start before the first round. A run that loses anything says
so: exit status 3 and one LOST line on stderr, whose counts by kind are
summed here. The applications are headless firefox-esr and headless
chromium taking a screenshot of about:blank (each skipped, with one line,
when it is not installed).

This is the measurement behind issue 33's goal of 0 lost events in 50
cold starts of each: a benchmark, not a test (a start of a browser is not
a fixture, and what it loses depends on its threads' timing).

Prints a Markdown table; --json prints the numbers instead.
Run as root:  sudo .venv/bin/python bench/bench_lost.py [-n 50] [--apps chromium]

EXAMPLES
  sudo .venv/bin/python bench/bench_lost.py -n 50
  sudo .venv/bin/python bench/bench_lost.py -n 10 --apps firefox --json
  sudo .venv/bin/python bench/bench_lost.py --trace /tmp/old/tracer/trace -n 20
"""
import argparse
import json
import os
import pathlib
import platform
import re
import shutil
import subprocess
import sys
import tempfile
import time

TOP = pathlib.Path(__file__).resolve().parent.parent
LOST_LINE = re.compile(r"(\d+) events LOST \((.*)\)")
KIND = re.compile(r"([a-z ]+): (\d+)")


def commands(work):
    """The applications' start commands, each with its own profile in @work."""
    firefox, chromium = work / "firefox", work / "chromium"
    return {
        "firefox": (["firefox-esr", "--headless", "--no-remote", "--profile",
                     str(firefox / "profile"), "--screenshot", str(firefox / "s.png"),
                     "about:blank"], firefox),
        # --no-sandbox: chromium refuses to run as root without it.
        "chromium": (["chromium", "--headless", "--no-sandbox",
                      f"--user-data-dir={chromium / 'profile'}",
                      f"--screenshot={chromium / 's.png'}", "about:blank"], chromium)}


def drop_caches():
    os.sync()
    pathlib.Path("/proc/sys/vm/drop_caches").write_text("3\n")


def lost_counts(stderr):
    """{kind: count} from trace's LOST line, {} when it has none."""
    match = LOST_LINE.search(stderr)
    if not match:
        return {}
    return {kind.strip(): int(n) for kind, n in KIND.findall(match.group(2)) if int(n)}


def one_start(trace, command, log, timeout):
    """One cold start under trace --used: (exit status, lost counts, seconds)."""
    drop_caches()
    began = time.monotonic()
    done = subprocess.run([trace, "--used", "-x", "-q", "-o", str(log), "--", *command],
                          capture_output=True, text=True, timeout=timeout)
    return done.returncode, lost_counts(done.stderr), time.monotonic() - began


def run_app(trace, name, command, work, rounds, timeout, progress):
    shutil.rmtree(work / "profile", ignore_errors=True)
    (work / "profile").mkdir(parents=True)
    subprocess.run(command, capture_output=True, timeout=timeout, check=True)
    runs = []
    for i in range(rounds):
        status, lost, seconds = one_start(trace, command, work / "used.log", timeout)
        runs.append({"status": status, "lost": lost, "seconds": round(seconds, 2)})
        if progress:
            print(f"bench_lost: {name} {i + 1}/{rounds}: exit {status}, "
                  f"lost {sum(lost.values())}", file=sys.stderr)
    return runs


def summary(name, runs):
    kinds = {}
    for run in runs:
        for kind, n in run["lost"].items():
            kinds[kind] = kinds.get(kind, 0) + n
    return {"app": name, "starts": len(runs),
            "starts_losing": sum(1 for r in runs if r["lost"]),
            "lost_total": sum(kinds.values()), "lost_by_kind": kinds,
            "other_failures": sum(1 for r in runs if r["status"] not in (0, 3)),
            "median_s": sorted(r["seconds"] for r in runs)[len(runs) // 2]}


def main():
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], epilog=__doc__.split("EXAMPLES\n")[1],
        formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("-n", "--rounds", type=int, default=50, help="cold starts an app")
    parser.add_argument("--apps", default="firefox,chromium", help="firefox,chromium")
    parser.add_argument("--trace", default=str(TOP / "tracer" / "trace"), help="trace binary")
    parser.add_argument("--timeout", type=float, default=120, help="seconds a start")
    parser.add_argument("--json", action="store_true", help="the numbers as JSON")
    args = parser.parse_args()
    if os.geteuid() != 0:
        sys.exit("bench_lost: needs root (trace, drop_caches)")
    results = []
    with tempfile.TemporaryDirectory(prefix="pagetrace-bench-lost-") as tmp:
        table = commands(pathlib.Path(tmp))
        for name in args.apps.split(","):
            command, work = table[name]
            if not shutil.which(command[0]):
                print(f"bench_lost: {name}: {command[0]} is not installed; skipped",
                      file=sys.stderr)
                continue
            runs = run_app(args.trace, name, command, work, args.rounds, args.timeout,
                           not args.json)
            results.append(summary(name, runs))
    machine = {"kernel": platform.release(), "cpus": os.cpu_count(),
               "date": time.strftime("%Y-%m-%d", time.gmtime())}
    if args.json:
        print(json.dumps({"machine": machine, "apps": results}, indent=2))
        return
    print(f"kernel {machine['kernel']}, {machine['cpus']} CPUs, {machine['date']}\n")
    print("| app | cold starts | starts losing events | events lost (by kind) | "
          "other failures | median s |")
    print("| --- | ---: | ---: | --- | ---: | ---: |")
    for r in results:
        kinds = ", ".join(f"{k}: {n}" for k, n in sorted(r["lost_by_kind"].items())) or "-"
        print(f"| {r['app']} | {r['starts']} | {r['starts_losing']} | {r['lost_total']} "
              f"({kinds}) | {r['other_failures']} | {r['median_s']:.2f} |")


if __name__ == "__main__":
    main()
