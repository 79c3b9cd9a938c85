#!/usr/bin/env python3
"""Days of churn, compressed (issue 44): `cachestat --openmetrics` and
`cachetop --by cgroup`, both below one parent cgroup, for --minutes while
a cgroup is made and removed every second (a reader in it reads a file
of its own, cold or warm, then leaves), a docker container is started and
removed every second (`docker run --rm` on a private dockerd, its cgroup
below the same parent: the tools name it through `docker inspect`), and
the exporter is scraped every second (each scrape parsed by
prometheus_client's OpenMetrics parser; the containers' names it gave
are counted).

Every 10 s: each tool's RSS (VmRSS), open descriptors, and the entries of
its per-cgroup BPF map (the kernel's count, through bpftool). At the end:
each figure's spread over the last (minutes - 10) minutes, which must
stay within 5% (a leak grows with the churn; the BPF map entries, which
come and go with the cgroups, under MAP_CEILING); the counts exact (a last
reader, in a cgroup of its own, reads a file cold then warm: the scrape's
counters go up by the pages the kernel brought in, mincore and
cachestat(2), and by as many hits); both tools stopped with SIGTERM, exit
0; nothing of theirs left in /sys/fs/cgroup or bpffs, no BPF program of
theirs alive; dockerd stopped, its containers and cgroups gone.

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
import private_dockerd  # noqa: E402
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


# The exporter drops gone cgroups every minute: at a cgroup and a
# container a second, its map holds at most two minutes of them and the
# live ones. Without the pruning it would hold every cgroup made.
MAP_CEILING = 2 * 2 * 60 + 10


def cgroup2_own():
    """(cgroup2's mount point, this process's cgroup below it)."""
    with open("/proc/self/cgroup") as f:
        own = [line.split(":", 2)[2].strip() for line in f if line.startswith("0::")][0]
    with open("/proc/self/mountinfo") as f:
        point = [line.split()[4] for line in f if " - cgroup2 " in line][0]
    return point, own


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
    containers = {s.labels["container"] for f in families for s in f.samples
                  if s.labels.get("container", "").startswith("soak-")}
    return totals, series, took, containers


def rmdir_retried(path, seconds=5):
    """rmdir PATH, retried while the kernel still counts its last task
    (EBUSY for a moment after that task was reaped)."""
    deadline = time.monotonic() + seconds
    while True:
        try:
            return os.rmdir(path)
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.05)


class Churn(threading.Thread):
    """A cgroup a second below @parent: made, a reader in it reads one of
    @files, removed. Each attempt has a name of its own: one that fails
    does not stop the next."""

    def __init__(self, parent, files, stop):
        super().__init__(daemon=True)
        self.parent, self.files, self.stop, self.made, self.errors = parent, files, stop, 0, []

    def run(self):
        attempt = 0
        while not self.stop.is_set():
            start = time.monotonic()
            path = os.path.join(self.parent, f"churn-{attempt}")
            attempt += 1
            try:
                os.mkdir(path)
                data = self.files[attempt % len(self.files)]
                if attempt % 7 == 0:
                    evict(data)
                subprocess.run([sys.executable, "-c", READER, f"{path}/cgroup.procs", data],
                               check=True, timeout=30)
                rmdir_retried(path)
                self.made += 1
            except (OSError, subprocess.SubprocessError) as err:
                self.errors.append(str(err))
            self.stop.wait(max(0.0, 1.0 - (time.monotonic() - start)))


# The containers' reader: static, so that the image needs nothing else.
READER_C = r"""
#include <fcntl.h>
#include <stdlib.h>
#include <unistd.h>
/* reader SECONDS FILE...: reads each FILE whole, then stays SECONDS. */
int main(int argc, char **argv)
{
	static char buf[65536];
	for (int i = 2; i < argc; i++) {
		int fd = open(argv[i], O_RDONLY);
		if (fd < 0)
			return 1;
		while (read(fd, buf, sizeof(buf)) > 0)
			;
		close(fd);
	}
	sleep(argc > 1 ? atoi(argv[1]) : 0);
	return 0;
}
"""
IMAGE = "pagetrace-soak:1"


def build_image(env, data_dir):
    """IMAGE, imported from a root of /reader and /data/f0..f3; the image
    layer's directory on the host (where its files are evicted)."""
    root = os.path.join(data_dir, "image-root")
    os.makedirs(os.path.join(root, "data"))
    with open(os.path.join(data_dir, "reader.c"), "w") as f:
        f.write(READER_C)
    subprocess.run(["cc", "-static", "-O2", "-o", os.path.join(root, "reader"),
                    os.path.join(data_dir, "reader.c")], check=True)
    for i in range(4):
        write_file(os.path.join(root, "data", f"f{i}"), (128 + 64 * i) << 10, seed=100 + i)
    tar = subprocess.Popen(["tar", "-C", root, "-c", "."], stdout=subprocess.PIPE)
    subprocess.run(["docker", "import", "-", IMAGE], stdin=tar.stdout, env=env, check=True,
                   capture_output=True)
    tar.wait()
    return private_dockerd.docker(env, "image", "inspect", "-f", "{{.GraphDriver.Data.UpperDir}}",
                                  IMAGE).stdout.strip()


# How long each container stays after its read: long enough for the
# exporter to name it (a container gone before its runtime is asked has
# no name), three at a time at a container a second.
CONTAINER_LIFE_S = 3


class ContainerChurn(threading.Thread):
    """A container a second, `docker run -d --rm` with its cgroup below
    @parent (each hierarchy's @cgroup_parent): it reads one of the image's
    files (cold every 5th: evicted through @layer), stays CONTAINER_LIFE_S,
    and is removed by dockerd when it exits."""

    def __init__(self, env, cgroup_parent, layer, stop):
        super().__init__(daemon=True)
        self.env, self.cgroup_parent, self.layer, self.stop = env, cgroup_parent, layer, stop
        self.made, self.errors = 0, []

    def run(self):
        attempt = 0
        while not self.stop.is_set():
            start = time.monotonic()
            name = f"/data/f{attempt % 4}"
            attempt += 1
            try:
                if attempt % 5 == 0:
                    evict(self.layer + name)
                private_dockerd.docker(self.env, "run", "-d", "--rm", "--network", "none",
                                       "--name", f"soak-{attempt}", "--cgroup-parent",
                                       self.cgroup_parent, IMAGE, "/reader",
                                       str(CONTAINER_LIFE_S), name, timeout=60)
                self.made += 1
            except (OSError, subprocess.SubprocessError) as err:
                self.errors.append(str(err)[-300:])
            self.stop.wait(max(0.0, 1.0 - (time.monotonic() - start)))


def cgroup_tops(relative):
    """Each hierarchy's cgroup RELATIVE (below its root), where it exists."""
    roots = [os.path.join("/sys/fs/cgroup", h) for h in os.listdir("/sys/fs/cgroup")]
    return [os.path.join(r, relative) for r in roots if os.path.isdir(os.path.join(r, relative))]


def cgroups_left(relative):
    """What the soak left below RELATIVE in any hierarchy: anything but
    RELATIVE itself and docker's parent of its containers there."""
    return sorted(d for top in cgroup_tops(relative) for d, _, _ in os.walk(top)
                  if d not in (top, os.path.join(top, "docker")))


def containers_exited(env, seconds):
    """Waits until dockerd runs no container (each removes itself on exit)."""
    deadline = time.monotonic() + seconds
    while private_dockerd.docker(env, "ps", "-q", timeout=60).stdout.split() and \
            time.monotonic() < deadline:
        time.sleep(0.5)


def remove_cgroups(relative, deadline_s=20):
    """Each hierarchy's cgroup RELATIVE and those below it, deepest first,
    retried while their last processes exit; those that stay."""
    tops = cgroup_tops(relative)
    deadline = time.monotonic() + deadline_s
    while True:
        left = []
        for top in tops:
            for d, _, _ in sorted(os.walk(top), key=lambda w: -w[0].count("/")):
                try:
                    os.rmdir(d)
                except FileNotFoundError:
                    pass
                except OSError:
                    left.append(d)
        if not left or time.monotonic() > deadline:
            return left
        time.sleep(0.5)


def exact_check(parent, data_dir, port):
    """A reader in a fresh cgroup reads a file cold then warm: the scrape's
    counters go up by the kernel's count of pages brought in (misses) and
    as many hits."""
    path = os.path.join(data_dir, "exact.bin")
    write_file(path, 1 << 20, seed=44)
    evict(path)
    before, _, _, _ = scrape(port)
    group = os.path.join(parent, "exact")
    os.mkdir(group)
    reader = subprocess.Popen([sys.executable, "-c", READER_WAITING, f"{group}/cgroup.procs",
                               path, path], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                              text=True)
    try:
        assert reader.stdout.readline() == "done\n"
        after, _, _, _ = scrape(port)
    finally:
        reader.communicate("end\n", timeout=60)
    os.rmdir(group)
    misses = len(cached_since_eviction(path))
    got = {k: int(after[k] - before[k]) for k in after}
    want = {"pagetrace_cache_hits_total": misses, "pagetrace_cache_misses_total": misses}
    return got == want and misses == (1 << 20) // PAGE, got, want


def spread(values):
    return (max(values) - min(values)) / min(values) if values and min(values) else 0.0


def bpffs_names():
    if not os.path.ismount("/sys/fs/bpf"):
        return set()
    return {os.path.join(d, n) for d, _, ns in os.walk("/sys/fs/bpf") for n in ns}


def start_tools(parent, port, env):
    """The exporter and cachetop, both counting below PARENT, reaching
    dockerd through ENV (DOCKER_HOST) to name containers."""
    exporter = subprocess.Popen([CACHESTAT, "--cgroup", parent, "--openmetrics",
                                 f"127.0.0.1:{port}", "-j", "1"], stdout=subprocess.DEVNULL,
                                stderr=subprocess.PIPE, text=True, env=env)
    try:
        top = subprocess.Popen([CACHETOP, "--by", "cgroup", "--cgroup", parent, "-j", "1"],
                               stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                               env=env)
    except OSError as err:
        exporter.kill()
        exporter.wait()
        raise SystemExit(f"soak_exporter: {CACHETOP}: {err.strerror}")
    return {"exporter": exporter, "cachetop": top}


def stop_tools(tools):
    """SIGTERM to each still running; their exit statuses."""
    status = {}
    for name, tool in tools.items():
        if tool.poll() is None:
            tool.send_signal(signal.SIGTERM)
        status[name] = tool.wait(timeout=60)
    return status


def soak_loop(tools, port, minutes, churns):
    """A scrape a second for MINUTES, a sample of each tool every 10 s."""
    samples, took_all, errors, names = [], [], [], set()
    scrapes = 0
    start = time.monotonic()
    end, next_sample = start + minutes * 60, start
    while time.monotonic() < end:
        tick = time.monotonic()
        for tool in tools.values():
            assert tool.poll() is None, tool.communicate()[1]
        try:
            _, series, took, seen = scrape(port)
            scrapes += 1
            names |= seen
            took_all.append(took)
        except Exception as err:  # a scrape that fails is counted, not fatal
            errors.append(repr(err))
            series = None
        if tick >= next_sample:
            row = {"t": round(tick - start, 1), "series": series,
                   "containers_named": len(names)}
            row.update({f"{c}_made": churn.made for c, churn in churns.items()})
            for name, tool in tools.items():
                rss, fds = proc_figures(tool.pid)
                row[name] = {"rss_kib": rss, "fds": fds, "map_entries": map_entries(tool.pid)}
            samples.append(row)
            print(json.dumps(row), flush=True)
            next_sample += 10
        time.sleep(max(0.0, 1.0 - (time.monotonic() - tick)))
    took_all.sort()
    ms = [round(1000 * took_all[int(q * (len(took_all) - 1))], 1) if took_all else None
          for q in (0.5, 0.99, 1.0)]
    return {"samples": samples, "scrapes": scrapes,
            "scrapes_over_100ms": sum(t > 0.1 for t in took_all),
            "scrape_ms_p50_p99_max": ms,
            "scrape_errors": errors[:5], "containers_named": len(names)}


def flatness(samples, minutes):
    """Each figure's spread over the last five sixths (the last 50 minutes
    of an hour), and its highest before that."""
    late = [s for s in samples if s["t"] >= minutes * 10]
    early = [s for s in samples if s["t"] < minutes * 10]
    out = {}
    for name in ("exporter", "cachetop"):
        for what in ("rss_kib", "fds", "map_entries"):
            values = [s[name][what] for s in late if s[name][what] is not None]
            before = [s[name][what] for s in early if s[name][what] is not None]
            out[f"{name}_{what}"] = {"first_max": max(before) if before else None,
                                     "last_min": min(values) if values else None,
                                     "last_max": max(values) if values else None,
                                     "spread": round(spread(values), 4)}
    return out


def passed(summary):
    """Exact, exit 0, nothing left (cgroups, bpffs, containers, files); RSS and descriptors flat within 5%; map
    entries (emptied every interval by cachetop, pruned every minute by the
    exporter) under MAP_CEILING; each churn made one at least every 2 s on
    the whole, and the exporter named containers."""
    return summary["exact"] and all(v == 0 for v in summary["exit"].values()) and \
        not summary["cgroups_left"] and not summary["cgroups_unremovable"] and \
        not summary["bpffs_left"] and summary["data_dir_removed"] and \
        not summary["docker_left"] and summary["containers_named"] > 0 and \
        all(summary[f"{c}_made"] >= summary["minutes"] * 30 for c in ("cgroups", "containers")) and \
        all(summary[f"{n}_{w}"]["spread"] <= 0.05 for n in ("exporter", "cachetop")
            for w in ("rss_kib", "fds")) and \
        all((summary[f"{n}_map_entries"]["last_max"] or 0) <= MAP_CEILING
            for n in ("exporter", "cachetop"))


def soak(args, relative, parent, data_dir, env):
    """The soak itself, in PARENT (RELATIVE below each hierarchy's root),
    with dockerd reached through ENV; its summary."""
    files = []
    for i in range(8):
        files.append(os.path.join(data_dir, f"f{i}.bin"))
        write_file(files[-1], (64 + 32 * i) << 10, seed=i)
    layer = build_image(env, data_dir)
    bpffs_before = bpffs_names()
    port = free_port()
    tools = start_tools(parent, port, env)
    stop = threading.Event()
    churns = {"cgroups": Churn(parent, files, stop),
              "containers": ContainerChurn(env, f"/{relative}/docker", layer, stop)}
    exact = got = want = None
    try:
        time.sleep(5)
        for churn in churns.values():
            churn.start()
        loop = soak_loop(tools, port, args.minutes, churns)
        stop.set()
        for churn in churns.values():
            churn.join(timeout=90)
        containers_exited(env, CONTAINER_LIFE_S + 30)
        exact, got, want = exact_check(parent, data_dir, port)
    finally:
        stop.set()
        for churn in churns.values():  # their last cgroups gone before the parent is removed
            churn.join(timeout=90)
        status = stop_tools(tools)
    summary = {"minutes": args.minutes, "exact": exact, "counts": got, "kernel": want,
               "exit": status, "bpffs_left": sorted(bpffs_names() - bpffs_before)}
    for name, churn in churns.items():
        summary[f"{name}_made"], summary[f"{name}_errors"] = churn.made, churn.errors[:5]
    summary.update({k: v for k, v in loop.items() if k != "samples"})
    summary.update(flatness(loop["samples"], args.minutes))
    return summary, loop["samples"]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--minutes", type=float, default=60)
    ap.add_argument("--json", help="write every sample here")
    ap.add_argument("--dir", default="/var/tmp",
                    help="a disk file system for the readers' files and dockerd's data")
    args = ap.parse_args()
    if os.geteuid() != 0:
        sys.exit("soak_exporter: needs root (BPF, cgroups, dockerd)")
    point, own = cgroup2_own()
    relative = os.path.join(own, f"pagetrace-soak-{os.getpid()}").lstrip("/")
    parent = os.path.join(point, relative)
    data_dir = os.path.join(args.dir, f"pagetrace-soak-{os.getpid()}")
    # SIGTERM stops the soak as Ctrl-C does: through the cleanup below,
    # which a second SIGTERM or Ctrl-C does not cut short.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    os.mkdir(parent)
    os.makedirs(data_dir)
    summary, samples = {}, []
    try:
        with private_dockerd.daemon(os.path.join(data_dir, "docker"), "pagetrace-soak",
                                    own_mounts=True) as env:
            summary, samples = soak(args, relative, parent, data_dir, env)
            summary["docker_left"] = private_dockerd.docker(
                env, "ps", "-aq", timeout=60).stdout.split()
    finally:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        summary["cgroups_left"] = cgroups_left(relative)
        summary["cgroups_unremovable"] = remove_cgroups(relative)
        subprocess.run(["rm", "-rf", data_dir])
        summary["data_dir_removed"] = not os.path.exists(data_dir)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"summary": summary, "samples": samples}, f, indent=1)
    print(json.dumps(summary, indent=1))
    sys.exit(0 if passed(summary) else 1)


if __name__ == "__main__":
    main()
