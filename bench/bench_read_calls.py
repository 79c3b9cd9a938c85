#!/usr/bin/env python3
"""The cost of system calls while trace --used (or cachestat/cachetop) runs.

`trace --used` and the cache tools attach to raw_syscalls:sys_enter to see
where each read call of a traced thread starts (docs/tracer.md, "A read
batch that ends on a page still being read"). That tracepoint makes every
system call on the machine take the tracing path while they run. This bench
times the calls themselves (bench/read-calls.c): 1-byte preads of a cached
file and getppid calls,

  untraced            nothing attached;
  beside trace --used an untraced process while `trace --used` traces a
                      sleeping command: what every other process pays;
  under trace --used  the traced process itself: preads also get their file
                      and position looked up;
  under trace         plain trace, which does not attach to sys_enter (the
                      control: about 1).

The modes alternate round by round (the order rotates), so that drift on a
noisy machine hits all alike; ratios are medians of each run against the
untraced run of its round.

Run as root:  sudo bench/bench_read_calls.py [--rounds 7] [--count 2000000]
"""
import argparse
import contextlib
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
TRACE = os.path.join(REPO, "tracer", "trace")
WORK_DIR = "/var/tmp/pagetrace-bench"
sys.path.insert(0, HERE)
from bench_trace import build_workload  # noqa: E402

MODES = ("untraced", "beside trace --used", "under trace --used", "under trace")
CALLS = ("pread", "getppid")


def ns_per_call(text):
    m = re.search(r"^([\d.]+) ns$", text, re.M)
    if not m:
        raise RuntimeError("read-calls printed no time:\n" + text[-2000:])
    return float(m.group(1))


def attached(pid, program, limit_s=10.0):
    """Wait until process PID holds BPF program PROGRAM (its fds' fdinfo)."""
    deadline = time.monotonic() + limit_s
    while time.monotonic() < deadline:
        names = set()
        with contextlib.suppress(OSError):
            for fd in os.listdir(f"/proc/{pid}/fdinfo"):
                with contextlib.suppress(OSError):
                    text = open(f"/proc/{pid}/fdinfo/{fd}").read()
                    for prog_id in re.findall(r"^prog_id:\s*(\d+)", text, re.M):
                        shown = subprocess.run(["bpftool", "prog", "show", "id", prog_id, "-j"],
                                               capture_output=True, text=True).stdout
                        with contextlib.suppress(ValueError):
                            names.add(json.loads(shown).get("name", ""))
        if any(n.endswith(program) for n in names):
            return
        time.sleep(0.1)
    raise RuntimeError(f"trace (pid {pid}) did not attach {program} within {limit_s} s")


@contextlib.contextmanager
def tracer_beside():
    """trace --used on a sleeping command, attached, for the block's length."""
    proc = subprocess.Popen([TRACE, "-q", "--used", "-o", os.devnull, "--", "sleep", "3600"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        attached(proc.pid, "raw_kern_entry")
        yield
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def run(mode, cmd):
    if mode == "untraced":
        return ns_per_call(subprocess.run(cmd, capture_output=True, text=True, check=True).stdout)
    if mode == "beside trace --used":
        with tracer_beside():
            return ns_per_call(subprocess.run(cmd, capture_output=True, text=True,
                                              check=True).stdout)
    options = ["--used"] if mode == "under trace --used" else []
    proc = subprocess.run([TRACE, "-q", *options, "-o", os.devnull, "--", *cmd],
                          capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError("trace failed: " + proc.stderr)
    return ns_per_call(proc.stdout)


def measure(rounds, count, path):
    binary = build_workload("read-calls")
    results = {(call, mode): [] for call in CALLS for mode in MODES}
    for r in range(rounds):
        order = MODES[r % len(MODES):] + MODES[:r % len(MODES)]
        for call in CALLS:
            cmd = [binary, "pread", path, str(count)] if call == "pread" else \
                  [binary, "getppid", str(count)]
            for mode in order:
                ns = run(mode, cmd)
                results[(call, mode)].append(ns)
                print(f"bench_read_calls: round {r + 1}/{rounds} {call} {mode}: {ns:.1f} ns",
                      file=sys.stderr)
    return results


def summarize(results):
    rows = []
    for (call, mode), values in results.items():
        base = results[(call, "untraced")]
        rows.append({"call": call, "mode": mode, "runs": len(values),
                     "median_ns": statistics.median(values),
                     "median_paired_ratio": statistics.median(v / u for v, u in zip(values, base)),
                     "median_paired_extra_ns": statistics.median(v - u for v, u in zip(values, base))})
    return rows


def markdown(rows):
    lines = ["| call | mode | runs | ns per call (median) | × untraced, paired | + ns, paired |",
             "| --- | --- | ---: | ---: | ---: | ---: |"]
    lines += [f"| {r['call']} | {r['mode']} | {r['runs']} | {r['median_ns']:.1f} | "
              f"{r['median_paired_ratio']:.3f} | {r['median_paired_extra_ns']:+.1f} |" for r in rows]
    return "\n".join(lines)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     epilog="Run as root: sudo bench/bench_read_calls.py --rounds 7",
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--count", type=int, default=2000000, help="calls per run")
    parser.add_argument("--json", action="store_true", help="print the numbers as JSON")
    args = parser.parse_args()
    if os.geteuid() != 0:
        sys.exit("bench_read_calls: needs root (BPF)")
    if args.rounds < 1 or args.count < 1:
        sys.exit("bench_read_calls: --rounds and --count must be at least 1")
    os.makedirs(WORK_DIR, exist_ok=True)
    with tempfile.NamedTemporaryFile(dir=WORK_DIR, suffix=".bin") as f:
        f.write(os.urandom(1 << 20))
        f.flush()
        rows = summarize(measure(args.rounds, args.count, f.name))
    print(json.dumps(rows, indent=1) if args.json else markdown(rows))


def ratio_rows(rows):
    """make bench's ratio rows: what a read call pays, traced and beside."""
    return [(f"{r['call']} × untraced, {r['mode']} (system-call cost)", r["median_paired_ratio"], "")
            for r in rows if r["mode"] != "untraced"]


if __name__ == "__main__":
    main()
