"""Synthetic traces, for benchmarks and tests of the reader's speed.

The generator imitates a program start-up: a few hundred files, each read
in runs of consecutive pages (readahead windows) at a few places, the files
interleaved in time. It is seeded, so a given size always gives the same
bytes.
"""
import numpy as np

from pagetrace.core import tracewriter
from pagetrace.core.escape import escape
from pagetrace.core.tracefile import RECORD_KINDS

# The header's other keys; version 2 (trace --used) adds the kind column
# and the kinds it may hold.
HEADER_FIELDS = {"command": "synthetic", "tracer": "pagetrace.synth"}
KINDS = RECORD_KINDS
# An access or a mapping follows its read by up to this many µs.
USE_DELAY_US = 500


def synthetic_records(n_records, n_files=300, page_size=4096, seed=1,
                      start_us=1_763_784_000_000_000):
    """Return (ts_us, file_index, offset, paths) arrays for a synthetic trace.

    Pages come in runs whose lengths follow a geometric law with a mean of
    16 pages (64 KiB, a typical readahead window); each run picks a file
    (small files more often than large ones) and a random page-aligned start.
    """
    rng = np.random.default_rng(seed)
    mean_run = 16
    # Twice the expected number of runs, so that they surely cover n_records.
    n_runs = 2 * (n_records // mean_run) + 16
    run_len = rng.geometric(1.0 / mean_run, size=n_runs)
    ends = np.cumsum(run_len)
    n_runs = int(np.searchsorted(ends, n_records) + 1)
    run_len = run_len[:n_runs]
    run_len[-1] -= int(ends[n_runs - 1] - n_records)
    # Zipf-like file popularity: file k is chosen with weight 1/(k+1).
    weights = 1.0 / np.arange(1, n_files + 1)
    run_file = rng.choice(n_files, size=n_runs, p=weights / weights.sum())
    file_pages = rng.integers(64, 65536, size=n_files)
    run_start = (rng.random(n_runs) * file_pages[run_file]).astype(np.int64)
    file_index = np.repeat(run_file, run_len)
    first_of_run = np.repeat(np.cumsum(run_len) - run_len, run_len)
    page = np.repeat(run_start, run_len) + (np.arange(n_records) - first_of_run)
    offset = page * page_size
    ts_us = start_us + np.cumsum(rng.integers(0, 20, size=n_records))
    paths = [f"/usr/lib/synthetic/lib{k:04d}.so" for k in range(n_files)]
    return ts_us, file_index, offset, paths


def add_used_records(ts_us, file_index, offset, used=0.6, mapped=0.25,
                     seed=1):
    """Version 2 records for synthetic reads: the first read of each page
    is followed (up to USE_DELAY_US later) by an `access` record with
    probability `used`; of the other pages, a share `mapped` get a `map`
    record. At most one of each per page, as the tracer writes them; a
    page read twice keeps both read records (reclaimed, read again).

    Returns (ts_us, file_index, offset, kind) in time order; `kind` holds
    indices into KINDS.
    """
    import pandas as pd
    rng = np.random.default_rng(seed)
    n = len(ts_us)
    first_read = ~pd.DataFrame({"file": file_index, "offset": offset}
                               ).duplicated().to_numpy()
    draw = rng.random(n)
    accessed = first_read & (draw < used)
    mapped_only = first_read & ~accessed & (
        draw < used + (1 - used) * mapped)
    delay = rng.integers(1, USE_DELAY_US, size=n)
    parts = [(np.ones(n, dtype=bool), 0, 0),
             (accessed, delay, 1), (mapped_only, delay, 2)]
    ts = np.concatenate([ts_us[m] + (d[m] if np.ndim(d) else d)
                         for m, d, _ in parts])
    kind = np.concatenate([np.full(int(m.sum()), k, dtype=np.int8)
                           for m, _, k in parts])
    files = np.concatenate([file_index[m] for m, _, _ in parts])
    offsets = np.concatenate([offset[m] for m, _, _ in parts])
    order = np.argsort(ts, kind="stable")
    return ts[order], files[order], offsets[order], kind[order]


def write_synthetic_trace(path, n_records, n_files=300, page_size=4096,
                          seed=1, chunk=1_000_000, used=None, mapped=0.25):
    """Write a synthetic trace of `n_records` read records to `path`; with
    `used` (a share, 0 to 1), a version 2 trace with access and map records
    too (add_used_records)."""
    ts_us, file_index, offset, paths = synthetic_records(
        n_records, n_files=n_files, page_size=page_size, seed=seed)
    kind = None
    if used is not None:
        ts_us, file_index, offset, kind = add_used_records(
            ts_us, file_index, offset, used=used, mapped=mapped, seed=seed)
    escaped = np.array([escape(p) for p in paths], dtype=object)
    kind_text = np.array([" " + k for k in KINDS], dtype=object)
    with open(path, "w", encoding="utf-8", newline="\n") as out:
        out.write(tracewriter.header(
            page_size, kinds=None if kind is None else RECORD_KINDS,
            fields=HEADER_FIELDS))
        for lo in range(0, len(ts_us), chunk):
            hi = min(lo + chunk, len(ts_us))
            lines = (ts_us[lo:hi].astype(str).astype(object) + " "
                     + escaped[file_index[lo:hi]] + " "
                     + offset[lo:hi].astype(str).astype(object))
            if kind is not None:
                lines = lines + kind_text[kind[lo:hi]]
            out.write("\n".join(lines.tolist()))
            out.write("\n")
        duration = int(ts_us[-1] - ts_us[0]) if n_records else 0
        files = len(np.unique(file_index))
        used = {} if kind is None else {"accessed": int((kind == 1).sum()),
                                        "mapped": int((kind == 2).sum())}
        out.write(tracewriter.trailer(n_records, page_size, files, duration,
                                      **used))


def synthetic_frame(n_records, n_files=300, page_size=4096, seed=1):
    """A synthetic trace as the DataFrame read_trace would return."""
    import pandas as pd
    ts_us, file_index, offset, paths = synthetic_records(
        n_records, n_files=n_files, page_size=page_size, seed=seed)
    frame = pd.DataFrame({
        "ts_us": ts_us,
        "path": pd.Categorical.from_codes(file_index, categories=paths),
        "offset": offset})
    frame.attrs["page_size"] = page_size
    return frame


def contiguous_layout_plan(requests, dev="8:0", start=0):
    """A replay plan for `requests` if every file were stored in one piece,
    the files one after the other in order of first access from byte
    `start` of the device. Each file takes the space up to the end of the
    highest page read from it."""
    import pandas as pd
    ends = (requests["offset"] + requests["length"]).groupby(
        requests["path"], observed=True, sort=False).max()
    file_start = dict(zip(ends.index, start + np.concatenate(
        ([0], np.cumsum(ends.to_numpy())[:-1]))))
    physical = requests["offset"].to_numpy() + np.array(
        [file_start[p] for p in requests["path"]], dtype=np.int64)
    return pd.DataFrame({
        "order": np.arange(len(requests), dtype=np.int64),
        "path": requests["path"].astype(str).astype("category"),
        "offset": requests["offset"].to_numpy(dtype=np.int64),
        "length": requests["length"].to_numpy(dtype=np.int64),
        "dev": pd.Categorical([dev] * len(requests)),
        "physical_offset": pd.array(physical, dtype="Int64")})
