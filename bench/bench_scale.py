#!/usr/bin/env python3
"""Benchmark: traces at scale (issue 12, docs/scale.md).

1. convert a --records-record text trace (100 million by default) to a
   Parquet dataset, then `pagetrace summary` it out of core: time, records/s
   and peak RSS of each step; then `pagetrace summary` of the text trace
   itself (one command: it converts to a work directory and summarises);
   with --baseline REV, the same two steps by REV's analysis package
   (`git archive`), first, in the same run;
2. `pagetrace merge --min-runs` over --runs runs (1,000 by default) of
   --run-records records (100 k) each: time and peak RSS.

Every step runs in its own process, and its peak RSS is that process's
ru_maxrss (os.wait4). The big trace is pagetrace.synth's 10 M-record
trace (seeded) written --records / 10 M times over, each copy shifted in
time; the runs are written straight as a Parquet dataset (the schema of
`pagetrace convert`), each a shared core of 80 % of its pages in a run-
specific order plus pages of its own, so that the consensus is the core.
Data goes to --dir (default /var/tmp/pagetrace-bench/scale) and is removed
afterwards.

USAGE
  .venv/bin/python bench/bench_scale.py [--records N] [--runs N]
      [--run-records N] [--dir DIR] [--keep] [--only trace|merge]
      [--baseline REV]

EXAMPLES
  .venv/bin/python bench/bench_scale.py                   # the full run
  .venv/bin/python bench/bench_scale.py --records 10000000 --runs 100
  .venv/bin/python bench/bench_scale.py --only trace --baseline 1fff9d0
"""
import argparse
import re
import os
import shutil
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
PAGETRACE = [sys.executable, "-m", "pagetrace.cli"]
COPY_RECORDS = 10_000_000
STDERR_LOG = "/tmp/pagetrace-bench-scale.stderr"


def run_measured(argv, pythonpath=None):
    """(seconds, peak RSS MiB, stdout) of one child process; `pythonpath`
    puts another copy of the package first."""
    env = dict(os.environ)
    if pythonpath:
        env["PYTHONPATH"] = pythonpath
    start = time.perf_counter()
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(read_end)
        os.dup2(write_end, 1)
        # The stability report and warnings: not part of the figures, but
        # kept for a failure's message.
        os.dup2(os.open(STDERR_LOG, os.O_WRONLY | os.O_CREAT | os.O_TRUNC,
                        0o644), 2)
        os.execve(argv[0], argv, env)
    os.close(write_end)
    chunks = []
    with os.fdopen(read_end, "rb") as pipe:
        for chunk in iter(lambda: pipe.read(65536), b""):
            chunks.append(chunk)
    _, status, usage = os.wait4(pid, 0)
    seconds = time.perf_counter() - start
    if os.waitstatus_to_exitcode(status) != 0:
        with open(STDERR_LOG, encoding="utf-8", errors="replace") as log:
            tail = log.read()[-2000:]
        sys.exit(f"bench_scale: {' '.join(argv)} failed "
                 f"({os.waitstatus_to_exitcode(status)}):\n{tail}")
    return seconds, usage.ru_maxrss / 1024, b"".join(chunks).decode()


def write_big_trace(path, n_records):
    """Header and n_records / 10 M shifted copies of the synthetic body."""
    import numpy as np

    from pagetrace.synth import HEADER_FIELDS, synthetic_records
    from pagetrace.tracewriter import header
    ts_us, file_index, offset, paths = synthetic_records(COPY_RECORDS)
    names = np.array(paths, dtype=object)[file_index]
    span = int(ts_us[-1] - ts_us[0]) + 1
    with open(path, "w", encoding="utf-8") as out:
        out.write(header(4096, fields=HEADER_FIELDS))
        left = n_records
        copy = 0
        while left > 0:
            n = min(left, COPY_RECORDS)
            for start in range(0, n, 1_000_000):
                stop = min(n, start + 1_000_000)
                ts = (ts_us[start:stop] + copy * span).astype(str)
                lines = ts.astype(object) + " " + names[start:stop] + " " + \
                    offset[start:stop].astype(str).astype(object)
                out.write("\n".join(lines.tolist()) + "\n")
            left -= n
            copy += 1


def write_runs(directory, n_runs, run_records, seed=1):
    """n_runs Parquet runs: a shared core (80 %) plus pages of their own."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.parquet as pq
    rng = np.random.default_rng(seed)
    n_core = run_records * 4 // 5
    files = [f"/usr/lib/app/lib{k:03d}.so".encode() for k in range(200)]
    core_file = rng.integers(0, len(files), n_core)
    core_offset = rng.integers(0, 1 << 16, n_core) * 4096
    # Distinct core pages: file and page together.
    core_key = np.unique(core_file.astype(np.int64) << 32 | core_offset >> 12)
    core_file, core_offset = core_key >> 32, (core_key & 0xFFFFFFFF) << 12
    n_core = len(core_key)
    for run in range(n_runs):
        n_own = run_records - n_core
        order = rng.permutation(n_core)
        own_file = rng.integers(0, len(files), n_own)
        # Own pages lie past the core's range, so they never meet it.
        own_offset = ((1 << 16) + rng.integers(0, 1 << 20, n_own)) * 4096
        file_index = np.concatenate([core_file[order], own_file])
        offset = np.concatenate([core_offset[order], own_offset])
        mix = rng.permutation(run_records)
        file_index, offset = file_index[mix], offset[mix]
        n = run_records
        dictionary = pa.array(files, pa.binary())
        table = pa.table({
            "line": pa.array(np.arange(1, n + 1, dtype=np.uint64)),
            "timestamp_us": pa.array(1_763_784_000_000_000 + np.arange(
                n, dtype=np.uint64) * 7),
            "path": pa.DictionaryArray.from_arrays(
                pa.array(file_index.astype(np.int32)), dictionary
            ).cast(pa.binary()),
            "offset": pa.array(offset.astype(np.uint64)),
            "kind": pa.array(["read"] * n, pa.string()),
            "page_size": pa.array(np.full(n, 4096, dtype=np.uint32))},
            metadata={b"pagetrace-format": b"1", b"page-size": b"4096"})
        run_dir = os.path.join(directory, f"run=r{run:04d}")
        os.makedirs(run_dir, exist_ok=True)
        pq.write_table(table, os.path.join(run_dir, "part-0.parquet"),
                       compression="snappy", use_dictionary=["path", "kind"])
    return n_core


def main():
    parser = argparse.ArgumentParser(
        description=__doc__.splitlines()[0],
        epilog=__doc__[__doc__.index("USAGE"):],
        formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--records", type=int, default=100_000_000)
    parser.add_argument("--runs", type=int, default=1000)
    parser.add_argument("--run-records", type=int, default=100_000)
    parser.add_argument("--memory-limit", default="512MB")
    parser.add_argument("--dir", default="/var/tmp/pagetrace-bench/scale")
    parser.add_argument("--keep", action="store_true",
                        help="keep the generated data")
    parser.add_argument("--only", choices=("trace", "merge"),
                        help="run one of the two parts")
    parser.add_argument("--baseline", metavar="REV",
                        help="also convert and summarise with the analysis "
                        "package of git revision REV, side by side")
    args = parser.parse_args()
    os.makedirs(args.dir, exist_ok=True)
    work = os.path.join(args.dir, "work")
    os.makedirs(work, exist_ok=True)
    try:
        if args.only != "merge":
            bench_trace(args, work)
        if args.only != "trace":
            bench_merge(args, work)
        print(f"cpus: {os.cpu_count()}")
    finally:
        if not args.keep:
            shutil.rmtree(args.dir, ignore_errors=True)
    return 0


def bench_trace(args, work):
    """Convert, then summarise the dataset out of core (REV's package
    first with --baseline); then summarise the text trace in one command."""
    trace = os.path.join(args.dir, "big.log")
    start = time.perf_counter()
    write_big_trace(trace, args.records)
    size = os.path.getsize(trace)
    print(f"wrote {args.records:,} records ({size / 2**30:.2f} GiB of "
          f"text) in {time.perf_counter() - start:.0f} s")
    if args.baseline:
        tree = baseline_tree(args.baseline, args.dir)
        convert_and_summarise(args, work, trace, tree,
                              f"baseline {args.baseline} ")
    convert_and_summarise(args, work, trace, None, "")
    summarise(args, work, trace, None, "summary of the text trace (one command)")
    os.unlink(trace)


def baseline_tree(rev, directory):
    """REV's analysis package, exported into DIR/baseline; its path."""
    tree = os.path.join(directory, "baseline")
    os.makedirs(tree, exist_ok=True)
    top = os.path.dirname(HERE)
    archive = subprocess.run(["git", "-C", top, "archive", rev, "analysis"],
                             capture_output=True, check=True).stdout
    subprocess.run(["tar", "-x", "-C", tree], input=archive, check=True)
    return os.path.join(tree, "analysis")


def check_pages(out, records):
    pages = int(out.split('"pages": ', 1)[1].split(",", 1)[0])
    assert pages == records, pages


def summarise(args, work, target, pythonpath, what):
    """`pagetrace summary` of TARGET, timed and checked; prints WHAT's line
    and returns (seconds, peak RSS in MiB)."""
    seconds, rss, out = run_measured(
        PAGETRACE + ["summary", "--json", "--memory-limit",
                     args.memory_limit, "--work-dir", work, target],
        pythonpath)
    check_pages(out, args.records)
    print(f"{what}: {seconds:.1f} s: {args.records / seconds / 1e6:.2f} M "
          f"records/s, peak RSS {rss:,.0f} MiB")
    return seconds, rss


def convert_and_summarise(args, work, trace, pythonpath, label):
    """`pagetrace convert` then `pagetrace summary` of the Parquet run, by
    the package at pythonpath (None: this tree's)."""
    dataset = os.path.join(args.dir, "dataset")
    seconds, rss, _ = run_measured(
        PAGETRACE + ["convert", "-q", "-o", dataset, trace], pythonpath)
    both_seconds, both_rss = seconds, rss
    run_dir = os.path.join(dataset, "run=big")
    parquet = sum(os.path.getsize(os.path.join(run_dir, name))
                  for name in os.listdir(run_dir))
    print(f"{label}convert: {args.records:,} records in {seconds:.1f} s: "
          f"{args.records / seconds / 1e6:.2f} M records/s, peak RSS "
          f"{rss:,.0f} MiB; Parquet {parquet / 2**30:.2f} GiB")
    seconds, rss = summarise(args, work, run_dir, pythonpath,
                             f"{label}summary (Parquet, out of core)")
    both_seconds += seconds
    print(f"{label}convert + summary: {both_seconds:.1f} s: "
          f"{args.records / both_seconds / 1e6:.2f} M records/s, peak RSS "
          f"{max(both_rss, rss):,.0f} MiB")
    known = os.path.join(run_dir, "_summary.json")
    if os.path.exists(known):
        # What a run without the conversion's summary costs (one written
        # by another tool): DuckDB's queries on the same file.
        os.unlink(known)
        summarise(args, work, run_dir, pythonpath,
                  f"{label}summary (Parquet, DuckDB, no _summary.json)")
    shutil.rmtree(dataset)


def bench_merge(args, work):
    """merge --min-runs over a dataset of many runs."""
    runs = os.path.join(args.dir, "runs")
    start = time.perf_counter()
    n_core = write_runs(runs, args.runs, args.run_records)
    print(f"wrote {args.runs:,} runs of {args.run_records:,} records "
          f"(core {n_core:,} pages) in {time.perf_counter() - start:.0f} s")
    merged = os.path.join(args.dir, "consensus.log")
    k = max(1, args.runs * 9 // 10)
    seconds, rss, _ = run_measured(
        PAGETRACE + ["merge", "--min-runs", str(k), "--memory-limit",
                     args.memory_limit, "--work-dir", work, "-o", merged,
                     runs])
    with open(merged, encoding="utf-8") as f:
        got = sum(1 for line in f if not line.startswith("#"))
    assert got == n_core, (got, n_core)
    total = args.runs * args.run_records
    print(f"merge --min-runs {k} of {args.runs:,} runs ({total:,} "
          f"records): {seconds:.1f} s: {total / seconds / 1e6:.2f} M "
          f"records/s, peak RSS {rss:,.0f} MiB; consensus = the core "
          f"({got:,} pages)")


if __name__ == "__main__":
    sys.exit(main())


def ratio_rows(text):
    """Rows of bench/run's ratio table from this benchmark's output."""
    rows = []
    for name, pattern, goal in (
            ("convert + summary, M records/s",
             r"^convert \+ summary: .*?([\d.]+) M records/s", "≥ 5"),
            ("convert + summary, peak RSS MiB",
             r"^convert \+ summary: .*peak RSS ([\d,]+) MiB", "≤ 1024"),
            ("convert, M records/s", r"^convert: .*?([\d.]+) M records/s",
             ""),
            ("summary (Parquet), M records/s",
             r"^summary \(Parquet, out of core\).*?([\d.]+) M records/s", ""),
            ("summary (Parquet, DuckDB, no _summary.json), M records/s",
             r"^summary \(Parquet, DuckDB.*?([\d.]+) M records/s", ""),
            ("summary of the text trace, M records/s",
             r"^summary of the text trace .*?([\d.]+) M records/s", ""),
            ("merge --min-runs, s", r"merge .*?: ([\d.]+) s:", ""),
            ("merge --min-runs, peak RSS MiB",
             r"merge .*peak RSS ([\d,]+) MiB", "")):
        found = re.search(pattern, text, re.MULTILINE)
        if found:
            rows.append((name, float(found[1].replace(",", "")), goal))
    return rows
