#!/usr/bin/env python3
"""Benchmark of replay/replay (issue 3), run by hand as root:

    bench/bench_replay.py [--dir DIR] [--size-mib 1024] [--repeats 10]

1. Device ceiling: a SIZE file read start to end. Its trace (every page in
   order, as the tracer would record a sequential read) is replayed with
   `replay --sorted`, alternating with `fio --rw=read --bs=1M --direct=1`
   on the same file; the ratio of mean throughputs should be >= 0.9.
2. Order and grouping: a synthetic scattered trace (runs of 1 to 16 pages
   at random places in a set of files, the files interleaved) replayed
   ungrouped, grouped, sorted and with --queue-depth 4; then the same for
   each real trace given with --trace (e.g. a startup recorded with
   `tracer/trace -o startup.log -- firefox-esr --headless ...`).

Each figure is the mean of --repeats runs +- its 95% confidence interval
(analysis/pagetrace/core/stats.py). Files are created in DIR (default
./bench-data, on the filesystem under test) and kept for the next run.
The default run takes under a minute on the development VM once the
files exist (creating them adds about 10 s per GiB).
"""
import argparse
import json
import os
import pathlib
import random
import re
import subprocess
import sys
import time

TOP = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(TOP / "analysis"))
from pagetrace.core import stats  # noqa: E402  (stdlib only)
from pagetrace.core.tracewriter import header, record_line  # noqa: E402

REPLAY = TOP / "replay" / "replay"
PAGE = 4096
MIB = 1 << 20


def make_file(path, size, seed):
    """A file of SIZE random bytes, kept when it already has that size."""
    if path.exists() and path.stat().st_size == size:
        return
    rng = random.Random(seed)
    with open(path, "wb") as f:
        for _ in range(size // MIB):
            f.write(rng.randbytes(MIB))
        f.flush()
        os.fsync(f.fileno())


def write_trace(path, pages):
    base = int(time.time() * 1e6)
    with open(path, "w") as f:
        f.write(header(PAGE))
        for i, (name, offset) in enumerate(pages):
            f.write(record_line(base + i, name, offset))


def evict(paths):
    for p in paths:
        fd = os.open(p, os.O_RDONLY)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        os.close(fd)


def run_replay(args, trace):
    out = subprocess.run([str(REPLAY), "--json", *args, str(trace)],
                         capture_output=True, text=True, check=True)
    return json.loads(out.stdout)


def run_fio(path, size):
    out = subprocess.run(
        ["fio", "--name=ceiling", f"--filename={path}", "--rw=read",
         "--bs=1M", "--direct=1", "--ioengine=psync", f"--size={size}",
         "--output-format=json"], capture_output=True, text=True, check=True)
    job = json.loads(out.stdout)["jobs"][0]["read"]
    return job["io_bytes"] / MIB / (job["runtime"] / 1000.0), \
        job["runtime"] / 1000.0


def ci_text(values, fmt="{:.3f}"):
    mean, low, high = stats.mean_ci(values)
    return f"{fmt.format(mean)} +- {fmt.format((high - low) / 2)}"


def device_ceiling(workdir, size, repeats):
    data = workdir / "ceiling.bin"
    trace = workdir / "ceiling.log"
    make_file(data, size, seed=1)
    write_trace(trace, [(data, off) for off in range(0, size, PAGE)])
    replay_mibs, fio_mibs = [], []
    for _ in range(repeats):
        evict([data])
        replay_mibs.append(run_replay(["--sorted"], trace)["mib_per_s"])
        evict([data])
        fio_mibs.append(run_fio(data, size)[0])
    ratio = stats.mean_ci(replay_mibs)[0] / stats.mean_ci(fio_mibs)[0]
    print(f"\n1. Device ceiling: {size // MIB} MiB sequential, "
          f"{repeats} runs each, alternating")
    print(f"{'':24} {'MiB/s':>20}")
    print(f"{'replay --sorted':24} {ci_text(replay_mibs, '{:.0f}'):>20}")
    print(f"{'fio bs=1M direct':24} {ci_text(fio_mibs, '{:.0f}'):>20}")
    print(f"ratio replay/fio: {ratio:.3f} (goal >= 0.9)")


def scattered_pages(files, file_size, target_pages, seed):
    """Runs of 1..16 pages at random offsets, files interleaved."""
    rng = random.Random(seed)
    pages = []
    while len(pages) < target_pages:
        name = rng.choice(files)
        run = rng.randint(1, 16)
        start = rng.randrange(0, file_size // PAGE - run) * PAGE
        pages += [(name, start + i * PAGE) for i in range(run)]
    return pages[:target_pages]


VARIANTS = [("original, ungrouped", ["--no-group"]),
            ("original, grouped", []),
            ("sorted", ["--sorted"]),
            ("original, --queue-depth 4", ["--queue-depth", "4"])]


def trace_files(trace):
    """The regular files a trace names (paths unescaped), to evict them."""
    paths = set()
    with open(trace, "rb") as f:
        for line in f:
            fields = line.split()
            if len(fields) >= 3 and not line.startswith(b"#"):
                raw = re.sub(rb"\\([0-3][0-7]{2})",
                             lambda m: bytes([int(m.group(1), 8)]), fields[1])
                paths.add(os.fsdecode(raw))
    return [p for p in paths if os.path.isfile(p)]


def compare_variants(trace, files, repeats, title):
    results = {name: [] for name, _ in VARIANTS}
    for _ in range(repeats):
        for name, args in VARIANTS:     # interleaved: drift hits all alike
            evict(files)
            results[name].append(run_replay(args, trace))
    print(title)
    print(f"{'variant':28} {'time (s)':>18} {'MiB/s':>14} {'requests':>9} "
          f"{'seeks':>7}")
    for name, _ in VARIANTS:
        runs = results[name]
        print(f"{name:28} {ci_text([r['elapsed_s'] for r in runs]):>18} "
              f"{ci_text([r['mib_per_s'] for r in runs], '{:.1f}'):>14} "
              f"{runs[0]['requests']:>9} {runs[0]['seeks']:>7}")


def order_and_grouping(workdir, repeats, n_files=16, file_mib=16,
                       pages=8192):
    files = [workdir / f"scatter-{i:02}.bin" for i in range(n_files)]
    for i, f in enumerate(files):
        make_file(f, file_mib * MIB, seed=100 + i)
    trace = workdir / "scattered.log"
    write_trace(trace, scattered_pages(files, file_mib * MIB, pages, 7))
    compare_variants(trace, files, repeats,
                     f"\n2. Order and grouping: {pages} pages of {n_files} "
                     f"files x {file_mib} MiB, runs of 1-16 pages; "
                     f"{repeats} runs each")


def describe_machine(workdir):
    dev = os.stat(workdir).st_dev
    model = pathlib.Path("/proc/cpuinfo").read_text().split("model name")[1]
    print(f"machine: {os.uname().release}, {os.cpu_count()} CPUs,"
          f"{model.split(':', 1)[1].splitlines()[0]}; data on device "
          f"{os.major(dev)}:{os.minor(dev)} ({workdir})")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--dir", default="bench-data")
    parser.add_argument("--size-mib", type=int, default=1024)
    parser.add_argument("--repeats", type=int, default=10)
    parser.add_argument("--trace", action="append", default=[],
                        help="also compare the variants on this trace")
    args = parser.parse_args()
    if os.geteuid() != 0:
        sys.exit("bench_replay: run as root (page-cache eviction)")
    if not REPLAY.exists():
        sys.exit(f"bench_replay: no {REPLAY}: run make -C replay")
    workdir = pathlib.Path(args.dir).resolve()
    workdir.mkdir(parents=True, exist_ok=True)
    describe_machine(workdir)
    device_ceiling(workdir, args.size_mib * MIB, args.repeats)
    order_and_grouping(workdir, args.repeats)
    for trace in args.trace:
        compare_variants(trace, trace_files(trace), args.repeats,
                         f"\n   {trace}: {args.repeats} runs each")


if __name__ == "__main__":
    main()
