#!/usr/bin/env python3
"""Days of churn, compressed (issue 44): `cachestat --openmetrics` and
`cachetop --by cgroup`, both below one parent cgroup, for --minutes while
a cgroup is made and removed every second (a reader in it reads a file
of its own, cold or warm, then leaves) and the exporter is scraped every
second (each scrape parsed by prometheus_client's OpenMetrics parser).

Every 10 s: each tool's RSS (VmRSS), open descriptors, and the entries of
its per-cgroup BPF map (the kernel's count, through bpftool). At the end:
each figure's spread over the last (minutes - 10) minutes, which must
stay within 5% (a leak grows with the churn; the BPF map entries, which
come and go with the cgroups, under MAP_CEILING); the counts exact (a last
reader, in a cgroup of its own, reads a file cold then warm: the scrape's
counters go up by the pages the kernel brought in, mincore and
cachestat(2), and by as many hits); both tools stopped with SIGTERM, exit
0; nothing of theirs left in /sys/fs/cgroup or bpffs, no BPF program of
theirs alive.

Not a test (an hour); holds no lock itself: run it under the machine lock.
Prints a Markdown summary; --json FILE writes the samples.

EXAMPLES
  sudo flock /work/locks/host .venv/bin/python bench/soak_exporter.py --minutes 60
  sudo .venv/bin/python bench/soak_exporter.py --minutes 3 --json /tmp/soak.json
"""
import argparse
import contextlib
import json
import os
import pathlib
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.request

TOP = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(TOP / "tests"))
from pagecache_util import PAGE, cached_since_eviction, evict, write_file  # noqa: E402

CACHESTAT = TOP / "tracer" / "cachestat"
CACHETOP = TOP / "tracer" / "cachetop"
# Joins the cgroup (argv[1]: its cgroup.procs) once started, so that its
# own start (the interpreter's files) is not counted there, then reads.
READER = ("import sys\n"
          "open(sys.argv[1], 'w').write(str(__import__('os').getpid()))\n"
          "for path in sys.argv[2:]:\n"
          "    with open(path, 'rb') as f:\n"
          "        while f.read(1 << 16):\n"
          "            pass\n")
# The same, then it says "done" and waits for a line: the scrape is taken
# before it exits (its interpreter's exit touches the page cache too).
READER_WAITING = READER + "print('done', flush=True)\nsys.stdin.readline()\n"


# The exporter drops gone cgroups every minute: at a cgroup a second, its
# map holds at most two minutes of them and the live ones. Without the
# pruning it would hold every cgroup made.
MAP_CEILING = 2 * 60 + 10


def cgroup2_parent():
    with open("/proc/self/cgroup") as f:
        own = [line.split(":", 2)[2].strip() for line in f if line.startswith("0::")][0]
    with open("/proc/self/mountinfo") as f:
        point = [line.split()[4] for line in f if " - cgroup2 " in line][0]
    return point + own


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def proc_figures(pid):
    with open(f"/proc/{pid}/status") as f:
        rss = int([line.split()[1] for line in f if line.startswith("VmRSS:")][0])
    return rss, len(os.listdir(f"/proc/{pid}/fd"))


def map_entries(pid, name="cgroups"):
    """Entries of the process's BPF map called @name (the kernel's)."""
    ids = set()
    for fd in os.listdir(f"/proc/{pid}/fdinfo"):
        with contextlib.suppress(OSError):
            text = open(f"/proc/{pid}/fdinfo/{fd}").read()
            if "map_id:" in text:
                ids.add(int(text.split("map_id:")[1].split()[0]))
    for i in ids:
        shown = json.loads(subprocess.run(["bpftool", "-j", "map", "show", "id", str(i)],
                                          capture_output=True, text=True).stdout or "{}")
        if shown.get("name") == name:
            dump = subprocess.run(["bpftool", "-j", "map", "dump", "id", str(i)],
                                  capture_output=True, text=True).stdout
            return len(json.loads(dump or "[]"))
    return None


def scrape(port):
    from prometheus_client.openmetrics.parser import text_string_to_metric_families
    start = time.monotonic()
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as r:
        body = r.read().decode()
    took = time.monotonic() - start
    families = list(text_string_to_metric_families(body))
    totals = {s.name: s.value for f in families for s in f.samples
              if s.name in ("pagetrace_cache_hits_total", "pagetrace_cache_misses_total")}
    series = sum(len(f.samples) for f in families)
    return totals, series, took


class Churn(threading.Thread):
    """A cgroup a second below @parent: made, a reader in it reads one of
    @files, removed."""

    def __init__(self, parent, files, stop):
        super().__init__(daemon=True)
        self.parent, self.files, self.stop, self.made, self.errors = parent, files, stop, 0, []

    def run(self):
        while not self.stop.is_set():
            start = time.monotonic()
            path = os.path.join(self.parent, f"churn-{self.made}")
            try:
                os.mkdir(path)
                data = self.files[self.made % len(self.files)]
                if self.made % 7 == 0:
                    evict(data)
                subprocess.run([sys.executable, "-c", READER, f"{path}/cgroup.procs", data],
                               check=True, timeout=30)
                os.rmdir(path)
                self.made += 1
            except (OSError, subprocess.SubprocessError) as err:
                self.errors.append(str(err))
            self.stop.wait(max(0.0, 1.0 - (time.monotonic() - start)))


def exact_check(parent, data_dir, port):
    """A reader in a fresh cgroup reads a file cold then warm: the scrape's
    counters go up by the kernel's count of pages brought in (misses) and
    as many hits."""
    path = os.path.join(data_dir, "exact.bin")
    write_file(path, 1 << 20, seed=44)
    evict(path)
    before, _, _ = scrape(port)
    group = os.path.join(parent, "exact")
    os.mkdir(group)
    reader = subprocess.Popen([sys.executable, "-c", READER_WAITING, f"{group}/cgroup.procs",
                               path, path], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                              text=True)
    try:
        assert reader.stdout.readline() == "done\n"
        after, _, _ = scrape(port)
    finally:
        reader.communicate("end\n", timeout=60)
    os.rmdir(group)
    misses = len(cached_since_eviction(path))
    got = {k: int(after[k] - before[k]) for k in after}
    want = {"pagetrace_cache_hits_total": misses, "pagetrace_cache_misses_total": misses}
    return got == want and misses == (1 << 20) // PAGE, got, want


def spread(values):
    return (max(values) - min(values)) / min(values) if values and min(values) else 0.0


def leftovers(parent, bpffs_before):
    left = [n for n in os.listdir(parent) if n.startswith(("churn-", "exact"))]
    bpffs = set()
    if os.path.ismount("/sys/fs/bpf"):
        bpffs = {os.path.join(d, n) for d, _, ns in os.walk("/sys/fs/bpf") for n in ns}
    return left, sorted(bpffs - bpffs_before)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--minutes", type=float, default=60)
    ap.add_argument("--json", help="write every sample here")
    ap.add_argument("--dir", default="/var/tmp", help="a disk file system for the readers' files")
    args = ap.parse_args()
    if os.geteuid() != 0:
        sys.exit("soak_exporter: needs root (BPF, cgroups)")
    parent = os.path.join(cgroup2_parent(), f"pagetrace-soak-{os.getpid()}")
    os.mkdir(parent)
    data_dir = os.path.join(args.dir, f"pagetrace-soak-{os.getpid()}")
    os.makedirs(data_dir)
    files = []
    for i in range(8):
        files.append(os.path.join(data_dir, f"f{i}.bin"))
        write_file(files[-1], (64 + 32 * i) << 10, seed=i)
    bpffs_before = set()
    if os.path.ismount("/sys/fs/bpf"):
        bpffs_before = {os.path.join(d, n) for d, _, ns in os.walk("/sys/fs/bpf") for n in ns}
    port = free_port()
    exporter = subprocess.Popen([CACHESTAT, "--cgroup", parent, "--openmetrics",
                                 f"127.0.0.1:{port}", "-j", "1"], stdout=subprocess.DEVNULL,
                                stderr=subprocess.PIPE, text=True)
    try:
        top = subprocess.Popen([CACHETOP, "--by", "cgroup", "--cgroup", parent, "-j", "1"],
                               stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    except OSError as err:
        exporter.kill()
        exporter.wait()
        os.rmdir(parent)
        sys.exit(f"soak_exporter: {CACHETOP}: {err.strerror}")
    # SIGTERM stops the soak as Ctrl-C does: through the cleanup below.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    time.sleep(5)
    stop = threading.Event()
    churn = Churn(parent, files, stop)
    churn.start()
    samples, scrapes, slow, errors = [], 0, [], []
    start = time.monotonic()
    end = start + args.minutes * 60
    next_sample = start
    try:
        while time.monotonic() < end:
            tick = time.monotonic()
            for tool in (exporter, top):
                assert tool.poll() is None, tool.communicate()[1]
            try:
                _, series, took = scrape(port)
                scrapes += 1
                if took > 0.1:
                    slow.append(took)
            except Exception as err:  # a scrape that fails is counted, not fatal
                errors.append(repr(err))
                series = None
            if tick >= next_sample:
                row = {"t": round(tick - start, 1), "cgroups_made": churn.made, "series": series}
                for name, tool in (("exporter", exporter), ("cachetop", top)):
                    rss, fds = proc_figures(tool.pid)
                    row[name] = {"rss_kib": rss, "fds": fds, "map_entries": map_entries(tool.pid)}
                samples.append(row)
                print(json.dumps(row), flush=True)
                next_sample += 10
            time.sleep(max(0.0, 1.0 - (time.monotonic() - tick)))
        stop.set()
        churn.join(timeout=60)
        exact, got, want = exact_check(parent, data_dir, port)
    finally:
        stop.set()
        churn.join(timeout=60)  # its last cgroup gone before the parent is removed
        status = {}
        for name, tool in (("exporter", exporter), ("cachetop", top)):
            if tool.poll() is None:
                tool.send_signal(signal.SIGTERM)
            status[name] = tool.wait(timeout=60)
        left, pinned = leftovers(parent, bpffs_before)
        with contextlib.suppress(OSError):
            for n in os.listdir(parent):
                if os.path.isdir(os.path.join(parent, n)):
                    os.rmdir(os.path.join(parent, n))
            os.rmdir(parent)
        subprocess.run(["rm", "-rf", data_dir])
    parent_gone = not os.path.exists(parent)
    # the last five sixths (the last 50 minutes of an hour)
    late = [s for s in samples if s["t"] >= args.minutes * 10]
    early = [s for s in samples if s["t"] < args.minutes * 10]
    summary = {"minutes": args.minutes, "cgroups_made": churn.made, "churn_errors": churn.errors[:5],
               "scrapes": scrapes, "scrape_errors": errors[:5], "scrapes_over_100ms": len(slow),
               "exact": exact, "counts": got, "kernel": want, "exit": status,
               "cgroups_left": left, "bpffs_left": pinned, "parent_removed": parent_gone}
    for name in ("exporter", "cachetop"):
        for what in ("rss_kib", "fds", "map_entries"):
            values = [s[name][what] for s in late if s[name][what] is not None]
            before = [s[name][what] for s in early if s[name][what] is not None]
            summary[f"{name}_{what}"] = {"first_max": max(before) if before else None,
                                         "last_min": min(values) if values else None,
                                         "last_max": max(values) if values else None,
                                         "spread": round(spread(values), 4)}
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"summary": summary, "samples": samples}, f, indent=1)
    print(json.dumps(summary, indent=1))
    # RSS and descriptors flat within 5%; map entries (emptied every interval
    # by cachetop, pruned every minute by the exporter) under MAP_CEILING
    ok = exact and all(v == 0 for v in status.values()) and not left and not pinned and \
        all(summary[f"{n}_{w}"]["spread"] <= 0.05 for n in ("exporter", "cachetop")
            for w in ("rss_kib", "fds")) and \
        all((summary[f"{n}_map_entries"]["last_max"] or 0) <= MAP_CEILING
            for n in ("exporter", "cachetop"))
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
