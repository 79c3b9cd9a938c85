#!/usr/bin/env python3
"""Where a start's time goes, per state (issue 43): the start's own I/O
and CPU stalls from cgroup2's pressure stall information. Each timed start
moves itself into a cgroup of its own just before its exec (a `sh`
wrapper, in every state alike), so that a launch's prefetching grandchild,
forked before, stays outside and only the start's tasks are counted:

  io.some   seconds in which at least one of the start's tasks waited for I/O
  io.full   seconds in which all of its runnable tasks did
  cpu.some  seconds in which at least one waited for a CPU
  cpu       the CPU time the start's tasks used (cpu.stat usage_usec)

States, in a new random order each round: cold (sync, drop_caches), hot
(a start just before), launched (cold, then launch/launch -q PACK -- CMD)
and pack-cached (cold, then the pack's pages alone read in disk order,
untimed: launch_disk.py's state of that name). Medians per state.

USAGE (root, cgroup2 mounted with pressure files)
  sudo .venv/bin/python bench/start_stalls.py [-n N] [--states LIST] [--dir DIR] APP PACK

APP is one of bench_launch.py's: firefox, chromium, pandas; DIR the
--dir of the bench_launch.py run that recorded PACK, so that the start is
the one recorded (its profile).

EXAMPLES
  sudo .venv/bin/python bench/start_stalls.py -n 6 --dir /var/tmp/b chromium \
      /var/tmp/b/chromium/machine/app.pack
  sudo .venv/bin/python bench/start_stalls.py --states launched,pack-cached --dir /var/tmp/b \
      firefox /var/tmp/b/firefox/machine/app.pack
"""
import argparse
import os
import pathlib
import random
import signal
import statistics
import subprocess
import sys
import time

TOP = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(TOP / "bench"))
import bench_launch  # noqa: E402
import launch_disk  # noqa: E402

STATES = ("cold", "hot", "launched", "pack-cached")
COLUMNS = ("seconds", "cpu", "io.some", "io.full", "cpu.some")
# A start that runs longer has hung (a browser waiting on its profile).
START_S = 120
# The wrapper: into the cgroup named by $0, then the start.
ENTER = 'echo $$ > "$0/cgroup.procs" && exec "$@"'


def cgroup2_root():
    for line in open("/proc/mounts"):
        fields = line.split()
        if fields[2] == "cgroup2" and os.path.exists(f"{fields[1]}/cpu.pressure"):
            return fields[1]
    sys.exit("start_stalls: no cgroup2 with pressure files is mounted")


def stalls(group):
    """{column: seconds} of the cgroup GROUP."""
    out = {}
    for resource in ("io", "cpu"):
        with open(f"{group}/{resource}.pressure") as f:
            for line in f:
                kind, *fields = line.split()
                if resource == "io" or kind == "some":
                    out[f"{resource}.{kind}"] = int(fields[-1].split("=")[1]) / 1e6
    with open(f"{group}/cpu.stat") as f:
        out["cpu"] = next(int(l.split()[1]) for l in f if l.startswith("usage_usec")) / 1e6
    return out


def remove(group):
    """Kills what is left in GROUP and removes it."""
    for _ in range(50):
        with open(f"{group}/cgroup.procs") as f:
            pids = [int(p) for p in f.read().split()]
        if not pids:
            break
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        time.sleep(0.02)
    os.rmdir(group)


def timed(root, argv, app, n):
    """One start of APP (the tail of ARGV) in a cgroup of its own."""
    group = f"{root}/pagetrace-stalls-{os.getpid()}-{n}"
    os.mkdir(group)
    try:
        argv = argv[:len(argv) - len(app)] + ["sh", "-c", ENTER, group, *app]
        started = time.perf_counter()
        start(argv)
        row = {"seconds": time.perf_counter() - started}
        time.sleep(0.1)
        row.update(stalls(group))
        return row
    finally:
        remove(group)


def start(argv):
    """ARGV to its end, its output dropped; at most START_S seconds."""
    try:
        subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                       check=False, timeout=START_S)
    except subprocess.TimeoutExpired:
        sys.exit(f"start_stalls: {argv[0]}: still running after {START_S} s")


def run(state, root, app, pack, n):
    if state == "hot":
        start(app)
    else:
        launch_disk.drop_caches()
        time.sleep(0.2)
    if state == "pack-cached" and launch_disk.sorted_read(pack, 0):
        sys.exit("start_stalls: the pack's sorted read failed")
    argv = [launch_disk.LAUNCHER, "-q", pack, "--", *app] if state == "launched" else app
    return timed(root, argv, app, n)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("-n", type=int, default=6, help="rounds (default 6)")
    parser.add_argument("--states", default=",".join(STATES))
    parser.add_argument("--dir", default="/var/tmp/pagetrace-bench/stalls",
                        help="bench_launch.py's --dir the pack was recorded "
                        "with (the browsers' profiles; made when missing)")
    parser.add_argument("app", choices=("firefox", "chromium", "pandas"))
    parser.add_argument("pack")
    args = parser.parse_args()
    states = args.states.split(",")
    if set(states) - set(STATES):
        sys.exit(f"start_stalls: --states: not among {', '.join(STATES)}")
    root = cgroup2_root()
    app = bench_launch.apps(pathlib.Path(args.dir))[args.app]
    if not (pathlib.Path(args.dir) / args.app / "profile").is_dir():
        bench_launch.make_profile(args.app, app, pathlib.Path(args.dir) / args.app, None)
    start(app)
    rows = {s: [] for s in states}
    for n in range(args.n):
        order = list(states)
        random.shuffle(order)
        for state in order:
            rows[state].append(run(state, root, app, args.pack, n))
        print(f"start_stalls: round {n + 1}/{args.n}", file=sys.stderr, flush=True)
    print(f"{'state':12s} " + " ".join(f"{c:>9s}" for c in COLUMNS) + "   (medians, s)")
    for state in states:
        print(f"{state:12s} " + " ".join(
            f"{statistics.median(r[c] for r in rows[state]):9.3f}" for c in COLUMNS))
    return 0


if __name__ == "__main__":
    sys.exit(main())
