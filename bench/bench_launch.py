#!/usr/bin/env python3
"""Prefetch packs as deployed (issue 22): `pagetrace pack` with its
defaults, then startup-bench's states selective, hot, launched (`pagetrace
launch PACK -- CMD`, by the C launcher launch/launch as deployed) and
launched-stale (every file of the pack replaced),
interleaved, on the machine's disk and under the cloud-3000 and hdd-150
device profiles, one startup-bench run per application and device. The
goals: launched recovers at least 85% of the I/O cost and neither launched
nor launched-stale is slower than selectively cold, on every device. After
each run, the read floor (pagetrace.tools.readfloor) of the files the start
reads, measured on the same device, says how much of that run's I/O cost
any prefetch into the page cache could recover at most.

Applications: headless firefox-esr and headless chromium taking a
screenshot of about:blank (each skipped, with one line, when it is not
installed), and (--apps pandas) this checkout's venv Python importing
pandas and matplotlib.pyplot (759 files: shared libraries, .py and .pyc),
whose I/O cost was too small to resolve on the machine's disk.

--devices hdd-7200, hdd-5400 (issue 43) run launch_disk.py instead: the
application's files in an image over diskemu's emulated seeking disk, the
start from it in a private mount namespace, the pack recorded there, and
the states cold, selective, hot, launched, whole-file (the trace's files
read whole beside the start, as vmtouch -t or ureadahead would) and bound
(the pack's sorted read, then a hot start), each from drop_caches but hot
and selective, interleaved; --devices machine runs the same states on the
machine's own disk. --apps pandas-container is a container's start
(launch_container.py: python3 importing numpy and pandas, an image
imported from a root made by mmdebstrap, dockerd started in the
namespace), on those devices only.

USAGE
  sudo .venv/bin/python bench/bench_launch.py [-n RUNS] [--dir DIR] [--devices LIST]

EXAMPLES
  sudo .venv/bin/python bench/bench_launch.py -n 20
  sudo .venv/bin/python bench/bench_launch.py -n 5 --devices none --apps chromium
  sudo .venv/bin/python bench/bench_launch.py -n 10 --devices hdd-7200 --apps firefox
  sudo .venv/bin/python bench/bench_launch.py -n 10 --devices machine,hdd-7200 \
      --apps pandas-container
"""
import argparse
import os
import pathlib
import re
import shutil
import subprocess
import sys

TOP = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(TOP / "analysis"))
from pagetrace.core import packfile  # noqa: E402
from pagetrace.tools import pagecache_files, readfloor, throttle  # noqa: E402
sys.path.insert(0, str(TOP / "bench"))
import launch_container  # noqa: E402
import launch_disk  # noqa: E402

STATES = "selective,hot,launched,launched-stale"
GAIN = re.compile(r"^(launched\S*) \(total\) vs selective: ([-+\d.]+)% \(95% CI (.*?)\); "
                  r"recovers (-?\d+)% of the I/O cost \(95% CI (.*?)\)", re.M)


def apps(work):
    firefox, chromium = work / "firefox", work / "chromium"
    return {
        "firefox": ["firefox-esr", "--headless", "--no-remote", "--profile",
                    str(firefox / "profile"), "--screenshot",
                    str(firefox / "s.png"), "about:blank"],
        # --no-sandbox: chromium refuses to run as root without it.
        "chromium": ["chromium", "--headless", "--no-sandbox",
                     f"--user-data-dir={chromium / 'profile'}",
                     f"--screenshot={chromium / 's.png'}", "about:blank"],
        "pandas": [str(TOP / ".venv" / "bin" / "python"), "-c",
                   "import pandas, matplotlib.pyplot"],
        # A container's start (launch_container.py): --devices of launch_disk only.
        "pandas-container": launch_container.COMMAND}


def make_profile(name, command, out, env):
    """A fresh browser profile (one untimed start)."""
    out.mkdir(parents=True, exist_ok=True)
    if name in ("firefox", "chromium"):
        shutil.rmtree(out / "profile", ignore_errors=True)
        (out / "profile").mkdir()
        subprocess.run(command, env=env, capture_output=True, check=True)


def prepare(name, command, out, env):
    """A fresh firefox profile (one untimed start), a cold trace for the
    files to evict, and the pack with pagetrace pack's defaults."""
    make_profile(name, command, out, env)
    os.sync()
    pathlib.Path("/proc/sys/vm/drop_caches").write_text("3\n")
    subprocess.run([TOP / "tracer" / "trace", "-x", "-q", "-o", out / "cold.log",
                    "--", *command], env=env, capture_output=True, check=True)
    done = subprocess.run([sys.executable, TOP / "scripts" / "pagetrace", "pack",
                           "-o", out / "app.pack", "--", *command], env=env,
                          capture_output=True, text=True)
    lines = done.stderr.strip().splitlines()
    if done.returncode:
        # Its own words, not a traceback of this script.
        sys.exit(f"bench_launch: {name}: pagetrace pack failed (exit status "
                 f"{done.returncode}): " + (lines[-1] if lines else "no message"))
    return lines[-1]


BEST = re.compile(r"^read floor: .*?: ([\d.]+) s .*can recover more than (\d+)%", re.M)
MEAN = re.compile(r"^(selective|hot) +\d+/\d+ +([\d.]+)", re.M)


def floor_line(out, device, bench_stdout):
    """The read floor (tools/readfloor.py) of the files that both the cold
    trace and the pack read, on DEVICE, and the largest share of this
    run's I/O cost any prefetch into the page cache could recover."""
    pack = packfile.read(out / "app.pack")
    traced = set(pagecache_files.read_trace(out / "cold.log").pages)
    # Files a browser's profile replaced since are gone: only those here.
    paths = readfloor.readable_files([f.path for f in pack.files if f.path in traced])
    limits = None if device == "none" else throttle.profile_limits(device)
    try:
        disks = throttle.disks_of(paths) if limits else ()
        seconds, reads = readfloor.measure(paths, limits, disks)
    except (readfloor.FloorError, throttle.ThrottleError, OSError) as err:
        return f"read floor: not measured: {err}"
    means = dict(MEAN.findall(bench_stdout))
    counted = f"; the kernel counted {reads} reads" if reads is not None else ""
    line = (f"read floor: one page of each of the {len(paths)} "
            f"files read by both the cold trace and the pack, all asked for at once: "
            f"{seconds:.3f} s (median of 3{counted})")
    if "selective" in means and "hot" in means:
        best = readfloor.best_share(float(means["selective"]), float(means["hot"]), seconds)
        if best is not None:
            line += (f"; no prefetch into the page cache can recover more than "
                     f"{best:.0%} of this run's I/O cost")
    return line


def ratio_rows(text):
    """(measure, value, goal) rows for bench/run's table."""
    rows = []
    for block in re.split(r"^### ", text, flags=re.M)[1:]:
        title = block.splitlines()[0]
        for state, change, _, percent, interval in GAIN.findall(block):
            goal = "≥ 0.85" if state == "launched" else ""
            rows.append((f"{title}: share of the I/O cost recovered by {state} "
                         f"(95% CI {interval}; {change}% against selective)",
                         int(percent) / 100, goal))
        best = BEST.search(block)
        if best:
            rows.append((f"{title}: the most any prefetch into the page cache could "
                         f"recover (read floor {best.group(1)} s)", int(best.group(2)) / 100, ""))
    return rows


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     epilog=__doc__[__doc__.index("USAGE"):],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("-n", "--runs", type=int, default=20, help="runs per state (default 20)")
    parser.add_argument("--dir", default="/var/tmp/pagetrace-bench/launch", help="work directory")
    parser.add_argument("--devices", default="none,cloud-3000,hdd-150",
                        help="none (the machine's disk) and device profiles "
                        "(startup-bench); hdd-7200, hdd-5400, machine (launch_disk.py)")
    parser.add_argument("--apps", default="firefox,chromium",
                        help="firefox, chromium, pandas, pandas-container (default "
                        "firefox,chromium)")
    args = parser.parse_args()
    work = pathlib.Path(args.dir)
    env = dict(os.environ, HOME=str(work / "firefox"))
    devices = args.devices.split(",")
    for name, command in apps(work).items():
        if name not in args.apps.split(","):
            continue
        if not shutil.which(command[0]):
            print(f"{command[0]} is not installed: {name} skipped\n")
            continue
        out = work / name
        container = None
        if name == "pandas-container":
            container = (launch_container.NAME, launch_container.root_tar(str(out)))
        for device in [d for d in devices if d in launch_disk.DEVICES]:
            print(f"### {name}, {launch_disk.DEVICES[device]}\n", flush=True)
            make_profile(name, command, out, env)
            text = launch_disk.run_device(device, str(out / device), args.runs, command,
                                          env, str(out), container)
            print(f"```\n{(text or 'failed: see its lines on stderr').strip()}\n```\n",
                  flush=True)
        devices_here = [d for d in devices if d not in launch_disk.DEVICES]
        if not devices_here or container:
            continue
        print(f"{name}: {' '.join(command)}\npack: {prepare(name, command, out, env)}\n")
        for device in devices_here:
            profile = [] if device == "none" else ["--device-profile", device]
            done = subprocess.run(
                [sys.executable, TOP / "scripts" / "startup-bench", "--trace", out / "cold.log",
                 "--pack", out / "app.pack", "-n", str(args.runs), "--states", STATES,
                 "--timeout", "120", *profile, "--csv", out / f"runs-{device}.csv",
                 "--", *command], env=env, capture_output=True, text=True)
            print(f"### {name}, {device if profile else 'the machine disk'}\n")
            print(f"```\n{done.stdout.strip()}", flush=True)
            print(f"{floor_line(out, device, done.stdout)}\n```\n", flush=True)
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except KeyboardInterrupt:
        print("bench_launch: interrupted", file=sys.stderr)
        sys.exit(130)
