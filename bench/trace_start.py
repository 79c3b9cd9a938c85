"""Real starts under the tracer (bench_trace.py --real-start).

Cold starts of headless firefox-esr and chromium (a screenshot of
about:blank, started as bench_lost.py starts them) and of Python importing
pandas (the project's .venv), each untraced, under `trace`, `trace --used`
and `cachetop -c`: the modes alternate within a round (the order rotates
every round), and the page cache is dropped (sync, drop_caches 3) before
every run.

Every command runs under bench/start-stamp.c, built static onto a tmpfs (it
reads nothing after the drop), which writes the monotonic clock just
before the command starts and just after it ends. Per run:

  command   the command's own time, from start-stamp: the same clock for
            every mode;
  reported  trace's own figure for it (the trailer's duration_us, which its
            summary line prints), for the trace modes;
  load      from the tool's exec (this script's clock just before spawning
            it) to the command's start;
  whole     from the tool's exec to its exit;
  BPF       the BPF run time the tool reports (trace's trailer bpf_ns,
            cachetop's JSON bpf_ns), beside the command's time less the
            untraced command's of the same round.

Medians with distribution-free 95% intervals (order statistics), and the
median of each run's ratio to the untraced run of its round.

--load-time (load_main) times only the tools' start, warm: from the
tool's exec to the start of /bin/true under start-stamp, each mode in
turn, the order rotated every round; "untraced" is the floor (start-stamp
started from this script).
"""
import json
import math
import os
import pathlib
import platform
import shlex
import shutil
import subprocess
import sys
import tempfile
import time

HERE = pathlib.Path(__file__).resolve().parent
REPO = HERE.parent
TOOLS = REPO / "tracer"
VENV_PYTHON = REPO / ".venv" / "bin" / "python"
STAMP_DIR = pathlib.Path("/dev/shm/pagetrace-bench-start")
MODES = ("untraced", "trace", "trace --used", "cachetop -c")
BASELINE = " (baseline)"


def build_stamp():
    """bench/start-stamp.c, static, on a tmpfs; its path."""
    STAMP_DIR.mkdir(parents=True, exist_ok=True)
    binary = STAMP_DIR / "start-stamp"
    subprocess.run(["cc", "-O2", "-static", "-Wall", "-Werror", "-o", str(binary),
                    str(HERE / "start-stamp.c")], check=True)
    return binary


def app_commands(work):
    """{name: command}: the browsers as bench_lost.py starts them, and pandas."""
    sys.path.insert(0, str(HERE))
    import bench_lost  # noqa: E402  (a sibling script, not a package)
    browsers = bench_lost.commands(work)
    return {"firefox": browsers["firefox"][0], "chromium": browsers["chromium"][0],
            "pandas": [str(VENV_PYTHON), "-c", "import pandas"]}


def drop_caches():
    os.sync()
    pathlib.Path("/proc/sys/vm/drop_caches").write_text("3\n")


def read_trailer(log):
    """The `# end:` line of trace's output LOG as {key: int}."""
    end = None
    with open(log, errors="replace") as f:
        for line in f:
            if line.startswith("# end: "):
                end = line
    if end is None:
        raise RuntimeError(f"{log}: no trailer")
    return {k: int(v) for k, v in (kv.split("=", 1) for kv in end[7:].split())}


def tool_command(mode, stamped, log, tools):
    """The argv of MODE around the STAMPED command (start-stamp FILE CMD...):
    trace and cachetop from TOOLS, or from TOOLS["baseline"] for a mode
    ending in BASELINE."""
    where = tools["baseline"] if mode.endswith(BASELINE) else tools["tools"]
    mode = mode.removesuffix(BASELINE)
    if mode == "untraced":
        return stamped
    if mode == "cachetop -c":
        return [str(where / "cachetop"), "-j", "-c", shlex.join(stamped)]
    used = ["--used"] if mode == "trace --used" else []
    return [str(where / "trace"), "-q", "--allow-lost", *used, "-o", str(log), "--", *stamped]


def one_run(mode, command, stamp, timeout, tools):
    """One cold run: {command, reported, load, whole, bpf, lost} in seconds
    (None where MODE does not say)."""
    stamp_file, log = STAMP_DIR / "stamp", STAMP_DIR / "trace.log"
    for path in (stamp_file, log):
        path.unlink(missing_ok=True)
    argv = tool_command(mode, [str(stamp), str(stamp_file), *command], log, tools)
    drop_caches()
    began = time.monotonic_ns()
    done = subprocess.run(argv, capture_output=True, text=True, errors="replace",
                          timeout=timeout)
    ended = time.monotonic_ns()
    if done.returncode != 0:
        raise RuntimeError(f"{mode}: exit {done.returncode}: {done.stderr[-2000:]}")
    start, end, status = (int(x) for x in stamp_file.read_text().split())
    run = {"command": (end - start) / 1e9, "load": (start - began) / 1e9,
           "whole": (ended - began) / 1e9, "reported": None, "bpf": None, "lost": 0}
    if mode.startswith("trace"):
        trailer = read_trailer(log)
        run.update(reported=trailer["duration_us"] / 1e6, lost=trailer["lost"],
                   bpf=trailer["bpf_ns"] / 1e9 if "bpf_ns" in trailer else None)
    elif mode.startswith("cachetop -c"):
        report = json.loads(done.stdout[done.stdout.index("{"):])
        run.update(lost=int(report["lost"]),
                   bpf=report["bpf_ns"] / 1e9 if "bpf_ns" in report else None)
    return run


def median_ci(values, confidence=0.95):
    """(median, low, high): the interval from order statistics, free of any
    distribution: the widest k with P(Binomial(n, 1/2) < k) <= (1 - c) / 2."""
    s = sorted(values)
    n = len(s)
    mid = s[n // 2] if n % 2 else (s[n // 2 - 1] + s[n // 2]) / 2
    tail, k, below = (1 - confidence) / 2, 0, 0.0
    while k < n and below + math.comb(n, k) / 2 ** n <= tail:
        below += math.comb(n, k) / 2 ** n
        k += 1
    if k == 0:
        return mid, float("nan"), float("nan")
    return mid, s[k - 1], s[n - k]


def measure(apps, rounds, timeout, modes, tools, progress=True):
    """{app: {mode: [run, ...]}}, the modes alternated within each round."""
    stamp = build_stamp()
    results = {}
    with tempfile.TemporaryDirectory(prefix="pagetrace-bench-start-") as tmp:
        table = app_commands(pathlib.Path(tmp))
        for app in apps:
            command = table[app]
            if not shutil.which(command[0]):
                print(f"bench_trace: {app}: {command[0]} is not installed; skipped",
                      file=sys.stderr)
                continue
            # A first, untraced start makes the profile (browsers): not counted.
            shutil.rmtree(pathlib.Path(tmp) / app / "profile", ignore_errors=True)
            (pathlib.Path(tmp) / app / "profile").mkdir(parents=True)
            subprocess.run(command, capture_output=True, timeout=timeout, check=True)
            runs = results[app] = {mode: [] for mode in modes}
            for r in range(rounds):
                order = modes[r % len(modes):] + modes[:r % len(modes)]
                for mode in order:
                    runs[mode].append(one_run(mode, command, stamp, timeout, tools))
                    if progress:
                        print(f"bench_trace: {app} round {r + 1}/{rounds} {mode}: "
                              f"{runs[mode][-1]['command']:.3f} s", file=sys.stderr)
    return results


def summarize(runs):
    """One row a mode: medians and intervals, ratios paired by round."""
    base = runs["untraced"]
    rows = []
    for mode, mine in runs.items():
        row = {"mode": mode, "runs": len(mine)}
        for key in ("command", "reported", "load", "whole", "bpf"):
            values = [r[key] for r in mine if r[key] is not None]
            row[key] = median_ci(values) if values else None
        row["ratio"] = median_ci([m["command"] / u["command"] for m, u in zip(mine, base)])
        row["added"] = median_ci([m["command"] - u["command"] for m, u in zip(mine, base)])
        row["lost"] = sum(r["lost"] for r in mine)
        rows.append(row)
    return rows


def _cell(triple, digits=3):
    if triple is None:
        return "–"
    mid, lo, hi = triple
    return f"{mid:.{digits}f}" if math.isnan(lo) else f"{mid:.{digits}f} ({lo:.{digits}f}–{hi:.{digits}f})"


def markdown(app, rows):
    lines = [f"#### {app}", "",
             "| mode | runs | command s | × untraced, paired | + s, paired | reported by trace s "
             "| BPF s reported | load s (exec to start) | whole s | lost |",
             "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for r in rows:
        lines.append(f"| {r['mode']} | {r['runs']} | {_cell(r['command'])} | "
                     f"{_cell(r['ratio'])} | {_cell(r['added'])} | {_cell(r['reported'])} | "
                     f"{_cell(r['bpf'])} | {_cell(r['load'])} | {_cell(r['whole'])} | "
                     f"{r['lost']} |")
    return "\n".join(lines)


def load_times(rounds, modes, tools):
    """{mode: [seconds from the tool's exec to the command's start]}, warm."""
    stamp = build_stamp()
    times = {mode: [] for mode in modes}
    for r in range(rounds + 1):
        order = modes[r % len(modes):] + modes[:r % len(modes)]
        for mode in order:
            stamp_file, log = STAMP_DIR / "stamp", STAMP_DIR / "trace.log"
            stamp_file.unlink(missing_ok=True)
            argv = tool_command(mode, [str(stamp), str(stamp_file), "/bin/true"], log, tools)
            began = time.monotonic_ns()
            done = subprocess.run(argv, capture_output=True, text=True, errors="replace")
            if done.returncode != 0:
                raise RuntimeError(f"{mode}: exit {done.returncode}: {done.stderr[-2000:]}")
            if r:  # the first round warms the page cache: not counted
                times[mode].append((int(stamp_file.read_text().split()[0]) - began) / 1e9)
    return times


def load_main(rounds, as_json, tools=None, baseline=None):
    """--load-time: exec to the command's start, this tree's tools (or
    TOOLS') and BASELINE's beside them."""
    about = machine()
    modes = MODES + (tuple(m + BASELINE for m in MODES[1:]) if baseline else ())
    where = {"tools": pathlib.Path(tools) if tools else TOOLS,
             "baseline": pathlib.Path(baseline) if baseline else None}
    times = load_times(rounds, modes, where)
    if as_json:
        print(json.dumps({"machine": about, "load_s": times}, indent=1))
        return
    print(f"kernel {about['kernel']}, {about['cpus']} CPUs, from {about['date']}: "
          f"`{about['command']}`\n")
    print("| mode | runs | exec to command start, median s (95% interval) | min–max s |")
    print("| --- | ---: | ---: | ---: |")
    for mode, values in times.items():
        print(f"| {mode} | {len(values)} | {_cell(median_ci(values))} | "
              f"{min(values):.3f}–{max(values):.3f} |")


def machine():
    return {"kernel": platform.release(), "cpus": os.cpu_count(),
            "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
            "command": " ".join(sys.argv)}


def main(apps, rounds, timeout, as_json, tools=None, baseline=None):
    """TOOLS: the directory of trace and cachetop (default: this tree's
    tracer/); BASELINE: another build's, whose trace and cachetop modes run
    beside, in the same rounds."""
    about = machine()
    modes = MODES + (tuple(m + BASELINE for m in MODES[1:]) if baseline else ())
    where = {"tools": pathlib.Path(tools) if tools else TOOLS,
             "baseline": pathlib.Path(baseline) if baseline else None}
    results = measure(apps, rounds, timeout, modes, where, progress=not as_json)
    if as_json:
        print(json.dumps({"machine": about, "runs": results}, indent=1))
        return
    print(f"kernel {about['kernel']}, {about['cpus']} CPUs, from {about['date']}: "
          f"`{about['command']}`\n")
    print("Medians (95% interval). Ratios and differences paired with the untraced run "
          "of the same round.\n")
    for app, runs in results.items():
        print(markdown(app, summarize(runs)) + "\n")
