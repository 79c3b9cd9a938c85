#!/usr/bin/env python3
"""Tracer overhead: traced versus untraced wall time of the worst case.

The workload (bench/fault-storm.c) takes COUNT single-page faults on a cold
1 GiB file mapped with MADV_RANDOM: one read from storage per fault, as many
events per second as the device gives. Untraced, `trace`, `trace --used`
(which also records the first access of every page), `cachetop -c` (the
cache tools' fault path) and `readpage.bt` runs
alternate round by round in one session, so that drift on a noisy
machine hits all alike; the file is evicted before every run. The
time compared is the workload's own (it prints it), not the tools' start-up.

--device disk puts the file in /var/tmp (here a virtio disk, about 40 us a
fault, which hides the tracer's cost); --device zram puts it on a fresh ext4
on a zram device made for the run (a few us a fault: the fast-device case).
readpage.stp runs where the kernel loads modules (a guest of the kernel
matrix): --modes untraced,trace,readpage.bt,readpage.stp there.
--baseline TRACE adds the same trace and cachetop modes run with another
build's binaries (say, the previous build's), side by side in the same
rounds.

--real-start times real cold starts instead (firefox-esr, chromium, the
pandas import), and --load-time each tool's time from its exec to its
command's start: bench/trace_start.py says how.

Prints a Markdown table; --json prints the numbers instead.
Run as root:  sudo bench/bench_trace.py [--rounds 5] [--count 200000]
              sudo bench/bench_trace.py --device zram --count 150000
              sudo bench/bench_trace.py --real-start --rounds 10
              sudo bench/bench_trace.py --load-time --rounds 20
"""
import argparse
import contextlib
import functools
import importlib.util
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)

# stats.py is stdlib-only; load it by path so the bench needs no pandas.
_spec = importlib.util.spec_from_file_location(
    "pagetrace_stats", os.path.join(REPO, "analysis", "pagetrace", "core", "stats.py"))
stats = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(stats)

TRACE = os.path.join(REPO, "tracer", "trace")
CACHETOP = os.path.join(REPO, "tracer", "cachetop")
# The wrapper mounts tracefs privately where it is absent.
READPAGE = os.path.join(REPO, "tracer", "readpage")
READPAGE_STAP = os.path.join(REPO, "tracer", "readpage-stap")
WORK_DIR = "/var/tmp/pagetrace-bench"
GiB = 1 << 30


def build_workload(name="fault-storm"):
    """bench/NAME.c built into bench/.output/NAME; its path."""
    out = os.environ.get("PAGETRACE_BENCH_BUILD", os.path.join(HERE, ".output"))
    os.makedirs(out, exist_ok=True)
    binary = os.path.join(out, name)
    subprocess.run(["cc", "-O2", "-Wall", "-Werror", "-o", binary,
                    os.path.join(HERE, f"{name}.c")], check=True)
    return binary


@contextlib.contextmanager
def zram_dir(size):
    """A fresh ext4 on a new zram device, big enough for a SIZE file;
    yields its mount point, and removes the device afterwards."""
    device = subprocess.run(["zramctl", "--find", "--size", str(size + (256 << 20))],
                            capture_output=True, text=True, check=True).stdout.strip()
    mountpoint = os.path.join(WORK_DIR, "zram-mnt")
    mounted = False
    try:
        subprocess.run(["mkfs.ext4", "-q", "-F", device], check=True)
        os.makedirs(mountpoint, exist_ok=True)
        subprocess.run(["mount", device, mountpoint], check=True)
        mounted = True
        yield mountpoint
    finally:
        if mounted:
            subprocess.run(["umount", mountpoint], check=False)
        subprocess.run(["zramctl", "--reset", device], check=False)


def make_file(size, directory=WORK_DIR):
    os.makedirs(directory, exist_ok=True)
    path = os.path.join(directory, "fault-storm.bin")
    if not os.path.exists(path) or os.path.getsize(path) != size:
        with open(path, "wb") as f:
            chunk = os.urandom(1 << 20)
            for _ in range(size >> 20):
                f.write(chunk)
            os.fsync(f.fileno())
    return path


def evict(path):
    fd = os.open(path, os.O_RDONLY)
    os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    os.close(fd)


def workload_seconds(text):
    m = re.search(r"^(\d+\.\d+) [01]$", text, re.M)
    if not m:
        raise RuntimeError("workload printed no time:\n" + text[-2000:])
    return float(m.group(1))


# Each runner returns (workload seconds, records, lost, BPF seconds the tool
# reports or None).
def run_untraced(cmd):
    out = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout
    return workload_seconds(out), None, 0, None


def run_trace(cmd, *options, binary=TRACE, env=None):
    with tempfile.NamedTemporaryFile(dir=WORK_DIR, suffix=".log") as log:
        proc = subprocess.run([binary, "-q", "--allow-lost", *options, "-o", log.name, "--", *cmd],
                              capture_output=True, text=True, env=env)
        if proc.returncode != 0:
            raise RuntimeError("trace failed: " + proc.stderr)
        trailer = open(log.name).read().rsplit("# end: ", 1)[1]
    fields = dict(kv.split("=") for kv in trailer.split())
    bpf = int(fields["bpf_ns"]) / 1e9 if "bpf_ns" in fields else None
    return workload_seconds(proc.stdout), int(fields["pages"]), int(fields["lost"]), bpf


def run_readpage_bt(cmd):
    proc = subprocess.run([READPAGE, "--raw", "-c", " ".join(cmd)],
                          capture_output=True, text=True, errors="replace")
    if proc.returncode != 0:
        raise RuntimeError("bpftrace failed: " + proc.stderr[-2000:])
    records = sum(1 for line in proc.stdout.splitlines() if line.startswith("@@pt "))
    lost = sum(int(n) for n in re.findall(r"Lost (\d+) events", proc.stdout + proc.stderr))
    return workload_seconds(proc.stdout), records, lost, None


def run_readpage_stap(cmd):
    """readpage.stp's module (compiled beforehand: readpage-stap --compile),
    records counted as readpage.bt's; probes skipped are events lost."""
    proc = subprocess.run([READPAGE_STAP, "--raw", "-c", " ".join(cmd)],
                          capture_output=True, text=True, errors="replace")
    if proc.returncode not in (0, 3):
        raise RuntimeError("readpage-stap failed: " + proc.stderr[-2000:])
    records = sum(1 for line in proc.stdout.splitlines() if line.startswith("@@pt "))
    lost = sum(int(n) for n in re.findall(r"skipped probes: (\d+)", proc.stderr))
    return workload_seconds(proc.stdout), records, lost, None


def run_trace_used(cmd, binary=TRACE):
    """trace --used: also every first access (here one per fault, through
    mm_filemap_fault) and the page-state bitmaps; records counted are reads."""
    return run_trace(cmd, "--used", binary=binary)


def run_trace_used_events(cmd, binary=TRACE):
    """trace --used with its faults from the fault events, where the kernel
    would give the PTE hooks (docs/fault-path.md): the two side by side."""
    return run_trace(cmd, "--used", binary=binary,
                     env=dict(os.environ, PAGETRACE_FAULTS="events"))


def run_cachetop(cmd, binary=CACHETOP):
    """cachetop -c: the cache tools' fault path (every access counted); its
    JSON's hits and misses counted as records, its lost as lost."""
    proc = subprocess.run([binary, "-j", "-c", " ".join(cmd)], capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError("cachetop failed: " + proc.stderr[-2000:])
    report = json.loads(proc.stdout[proc.stdout.index("{"):])
    records = int(report["hits"]) + int(report["misses"])
    bpf = report["bpf_ns"] / 1e9 if "bpf_ns" in report else None
    # cachetop -c gives the command's output to stderr, its report to stdout.
    return workload_seconds(proc.stderr), records, int(report["lost"]), bpf


def baseline_modes(binary):
    """The trace and cachetop modes again, with another build's binaries
    (cachetop: the one beside the trace binary)."""
    cachetop = os.path.join(os.path.dirname(binary), "cachetop")
    return [("trace (baseline)", functools.partial(run_trace, binary=binary)),
            ("trace --used (baseline)", functools.partial(run_trace_used, binary=binary)),
            ("cachetop -c (baseline)", functools.partial(run_cachetop, binary=cachetop))]


MODES = [("untraced", run_untraced), ("trace", run_trace), ("trace --used", run_trace_used),
         ("trace --used (fault events)", run_trace_used_events), ("cachetop -c", run_cachetop),
         ("readpage.bt", run_readpage_bt), ("readpage.stp", run_readpage_stap)]
# readpage.stp needs its module compiled; the fault events differ from
# --used only where the kernel gives the PTE hooks (a guest of the matrix).
NOT_BY_DEFAULT = ("readpage.stp", "trace --used (fault events)")


def measure(rounds, count, file_size, modes, directory=WORK_DIR):
    binary = build_workload()
    path = make_file(file_size, directory)
    cmd = [binary, path, str(count)]
    results = {name: {"seconds": [], "events": [], "lost": 0, "bpf": []} for name, _ in modes}
    for r in range(rounds):
        # Rotate the order every round, so no mode always runs first.
        order = modes[r % len(modes):] + modes[:r % len(modes)]
        for name, runner in order:
            evict(path)
            seconds, events, lost, bpf = runner(cmd)
            results[name]["seconds"].append(seconds)
            results[name]["bpf"].append(bpf)
            if events is not None:
                results[name]["events"].append(events)
            results[name]["lost"] += lost
            print(f"bench_trace: round {r + 1}/{rounds} {name}: {seconds:.3f} s", file=sys.stderr)
    return results


def bpf_programs(pid):
    """{program name: (run_cnt, run_time_ns)} of the BPF programs that PID
    holds open (their ids are in its fds' fdinfo)."""
    ids = set()
    fdinfo = f"/proc/{pid}/fdinfo"
    for fd in os.listdir(fdinfo):
        with contextlib.suppress(OSError):
            ids.update(int(m) for m in re.findall(r"^prog_id:\s*(\d+)", open(f"{fdinfo}/{fd}").read(), re.M))
    shown = json.loads(subprocess.run(["bpftool", "prog", "show", "-j"], capture_output=True,
                                      text=True, check=True).stdout)
    return {p["name"]: (p.get("run_cnt", 0), p.get("run_time_ns", 0)) for p in shown
            if p["id"] in ids}


def cpu_ns(pid):
    """utime + stime of process PID itself (not its children), in ns."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) * 1e9 / os.sysconf("SC_CLK_TCK")


def profile(count, file_size, directory, options, tracer=TRACE):
    """Run the workload once under `trace OPTIONS` with kernel.bpf_stats_enabled
    set, and return (faults, {program: (runs, ns)}) read while trace still
    holds its programs (the command sleeps after the workload)."""
    binary = build_workload()
    path = make_file(file_size, directory)
    evict(path)
    stats_file = "/proc/sys/kernel/bpf_stats_enabled"
    before = open(stats_file).read().strip()
    with open(stats_file, "w") as f:
        f.write("1")
    try:
        with tempfile.NamedTemporaryFile(dir=WORK_DIR, suffix=".log") as log:
            proc = subprocess.Popen([tracer, "-q", "--allow-lost", *options, "-o", log.name, "-c",
                                     f"echo start; {binary} {path} {count}; sleep 3"],
                                    stdout=subprocess.PIPE, text=True)
            proc.stdout.readline()
            started = cpu_ns(proc.pid)
            workload_seconds(proc.stdout.readline())
            programs = bpf_programs(proc.pid)
            programs["(user side: trace's CPU while the workload ran)"] = (
                1, cpu_ns(proc.pid) - started)
            proc.communicate()
    finally:
        with open(stats_file, "w") as f:
            f.write(before)
    return programs


def profile_markdown(count, profiles):
    lines = ["| trace options | program | runs | runs per fault | ns per run | ns per fault |",
             "| --- | --- | ---: | ---: | ---: | ---: |"]
    for options, programs in profiles:
        total = 0
        for name, (runs, ns) in sorted(programs.items(), key=lambda kv: -kv[1][1]):
            if not runs:
                continue
            if not name.startswith("("):
                total += ns
            lines.append(f"| {options or '(none)'} | {name} | {runs} | {runs / count:.2f} | "
                         f"{ns / runs:.0f} | {ns / count:.0f} |")
        lines.append(f"| {options or '(none)'} | **all BPF** | | | | **{total / count:.0f}** |")
    return "\n".join(lines)


def summarize(results, count):
    base = sum(results["untraced"]["seconds"]) / len(results["untraced"]["seconds"])
    rows = []
    for name in results:
        secs = results[name]["seconds"]
        mean, lo, hi = stats.mean_ci(secs)
        events = results[name]["events"]
        rows.append({
            "mode": name, "runs": len(secs), "mean_s": mean,
            "ci95_s": (hi - mean) if len(secs) > 1 else None,
            "ratio_vs_untraced": mean / base,
            # Each run against the untraced run of its own round: the machine's
            # drift cancels within a round.
            "median_paired_ratio": statistics.median(
                t / u for t, u in zip(secs, results["untraced"]["seconds"])),
            "events_per_s": (sum(events) / len(events)) / mean if events else None,
            "records_per_run": (sum(events) / len(events)) if events else None,
            "lost": results[name]["lost"], "faults_per_run": count,
            # The tool's own figure of its BPF time beside what the workload lost
            # to it (paired by round): the first should explain most of the second.
            "bpf_s": statistics.median(bpf) if (bpf := [b for b in results[name]["bpf"]
                                                         if b is not None]) else None,
            "added_s": statistics.median(
                t - u for t, u in zip(secs, results["untraced"]["seconds"])),
        })
    return rows


def markdown(rows):
    lines = ["| mode | runs | workload time (s) | × untraced | median × untraced, paired by round "
             "| + s, paired (median) | BPF s the tool reports (median) | records/run | events/s "
             "| lost |",
             "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for r in rows:
        ci = f" ± {r['ci95_s']:.3f}" if r["ci95_s"] is not None else ""
        rec = f"{r['records_per_run']:.0f}" if r["records_per_run"] is not None else "–"
        eps = f"{r['events_per_s']:.0f}" if r["events_per_s"] is not None else "–"
        bpf = f"{r['bpf_s']:.3f}" if r["bpf_s"] is not None else "–"
        lines.append(f"| {r['mode']} | {r['runs']} | {r['mean_s']:.3f}{ci} | "
                     f"{r['ratio_vs_untraced']:.3f} | {r['median_paired_ratio']:.3f} | "
                     f"{r['added_s']:+.3f} | {bpf} | {rec} | {eps} | {r['lost']} |")
    return "\n".join(lines)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int,
                        help="default 5; --real-start: 10; --load-time: 20")
    parser.add_argument("--count", type=int, default=200000, help="faults per run")
    parser.add_argument("--file-size-mib", type=int, default=1024)
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--device", choices=("disk", "zram"), default="disk",
                        help="where the file lives: /var/tmp (disk) or ext4 on zram")
    parser.add_argument("--baseline", metavar="TRACE",
                        help="also run the trace and cachetop modes with this trace binary "
                             "(and the cachetop beside it)")
    instead = parser.add_mutually_exclusive_group()
    instead.add_argument("--profile", action="store_true",
                         help="instead: BPF time per program and per fault (bpf_stats_enabled)")
    instead.add_argument("--real-start", action="store_true",
                         help="instead: cold starts of real applications (trace_start.py)")
    instead.add_argument("--load-time", action="store_true",
                         help="instead: each tool's exec to its command's start (trace_start.py)")
    parser.add_argument("--apps", default="firefox,chromium,pandas",
                        help="--real-start: from firefox, chromium, pandas")
    parser.add_argument("--timeout", type=float, default=120, help="--real-start: s a run")
    parser.add_argument("--tools", metavar="DIR",
                        help="--real-start: trace and cachetop from DIR (default: tracer/)")
    parser.add_argument("--modes", default=",".join(name for name, _ in MODES
                                                if name not in NOT_BY_DEFAULT),
                        help="comma-separated, from: " + ", ".join(name for name, _ in MODES))
    args = parser.parse_args()
    args.rounds = args.rounds or (None if args.real_start or args.load_time else 5)
    baseline_dir = args.baseline and os.path.dirname(os.path.abspath(args.baseline))
    if args.load_time:
        if os.geteuid() != 0:
            sys.exit("bench_trace: needs root (BPF)")
        import trace_start  # noqa: E402  (beside this script)
        trace_start.load_main(args.rounds or 20, args.json, args.tools, baseline_dir)
        return
    if args.real_start:
        if os.geteuid() != 0:
            sys.exit("bench_trace: needs root (BPF, drop_caches)")
        import trace_start  # noqa: E402  (beside this script)
        trace_start.main(args.apps.split(","), args.rounds or 10, args.timeout, args.json,
                         args.tools, baseline_dir)
        return
    known = dict(MODES)
    wanted = [m.strip() for m in args.modes.split(",")]
    if "untraced" not in wanted or any(m not in known for m in wanted):
        sys.exit(f"bench_trace: --modes: give untraced and any of {', '.join(known)}")
    modes = [(m, known[m]) for m in wanted]
    if args.baseline:
        modes += [m for m in baseline_modes(args.baseline) if m[0].split(" (")[0] in wanted]
    if os.geteuid() != 0:
        sys.exit("bench_trace: needs root (BPF, page cache eviction)")
    size = args.file_size_mib << 20
    with (zram_dir(size) if args.device == "zram" else contextlib.nullcontext(WORK_DIR)) as where:
        if args.profile:
            binaries = [("", TRACE)] + ([(" (baseline)", args.baseline)] if args.baseline else [])
            profiles = [(o + label, profile(args.count, size, where, o.split(), binary))
                        for _ in range(args.rounds if args.baseline else 1)
                        for o in ("", "--used") for label, binary in binaries]
            print(profile_markdown(args.count, profiles))
            return
        results = measure(args.rounds, args.count, size, modes, where)
    rows = summarize(results, args.count)
    print(json.dumps(rows, indent=1) if args.json else markdown(rows))


if __name__ == "__main__":
    main()
