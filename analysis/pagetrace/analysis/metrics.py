"""What a trace read, and what its order cost in requests and seeks.

Requests are built with the rule `replay` uses: consecutive pages of one
file, adjacent both in trace order and in offset, form one request, split
so that no request exceeds `max_request_bytes`.

Seeks: a request is a seek when it does not start where the previous one
ended. In file-offset space "where it ended" means the same file at the
previous request's end offset; a jump to another file is a seek whose
distance is unknown (NaN), because file offsets of two files say nothing
about where they are on disk. In physical space (from a replay plan) the
previous request is the previous one on the same device, which has its own
head; requests without a physical offset are left out.

Metadata records (a device node's pages, docs/trace-format.md) are pages
read from storage too: they are in `pages` and `bytes`, and counted apart in
`metadata_pages`; `files` counts files only.

Everything here is about pages read from storage: in a version 2 trace
(`trace --used`) only the `read` records count, never the `access` and
`map` records that say which pages the program used (see waste.py).
"""
import numpy as np
import pandas as pd

from pagetrace.core.tracefile import METADATA_PREFIX, is_metadata

# The request size replay documents as its default (docs/data-formats.md
# example, `max_request_bytes`).
DEFAULT_MAX_REQUEST_BYTES = 1 << 20


def read_records(frame):
    """The rows of `frame` that are pages read from storage: all of them in
    a version 1 trace, the `read` records of a version 2 one. Returns
    `frame` itself when nothing is left out."""
    if "kind" not in frame.columns:
        return frame
    is_read = (frame["kind"] == "read").to_numpy()
    if is_read.all():
        return frame
    reads = frame.loc[is_read]
    reads.attrs = dict(frame.attrs)
    return reads


def metadata_rows(frame):
    """Boolean array: the rows that are metadata records (a device node's
    pages, docs/trace-format.md), told by the path alone."""
    paths = frame["path"]
    if hasattr(paths, "cat"):
        flags = np.array([is_metadata(str(p)) for p in paths.cat.categories] + [False])
        return flags[paths.cat.codes.to_numpy()]
    return paths.astype(str).str.startswith(METADATA_PREFIX).to_numpy()


def page_size_of(frame, page_size=None):
    if page_size is not None:
        return int(page_size)
    return int(frame.attrs.get("page_size", 4096))


def per_file(frame, page_size=None):
    """Per file: pages, bytes, first and last access, span (µs), in order of
    first access."""
    page_size = page_size_of(frame, page_size)
    frame = read_records(frame)
    grouped = frame.groupby("path", observed=True, sort=False)
    table = pd.DataFrame({
        "pages": grouped.size(),
        "unique_pages": grouped["offset"].nunique(),
        "first_us": grouped["ts_us"].min(),
        "last_us": grouped["ts_us"].max(),
    })
    table["bytes"] = table["pages"] * page_size
    table["span_us"] = table["last_us"] - table["first_us"]
    table = table.sort_values(["first_us"], kind="stable")
    table.index = table.index.astype(object)
    return table[["pages", "unique_pages", "bytes", "first_us", "last_us",
                  "span_us"]]


def totals(frame, page_size=None):
    """Whole-trace figures: pages, bytes, files, duration and throughput."""
    page_size = page_size_of(frame, page_size)
    frame = read_records(frame)
    pages = len(frame)
    duration_us = int(frame["ts_us"].max() - frame["ts_us"].min()) \
        if pages else 0
    unique_pages = int(len(frame.drop_duplicates(["path", "offset"])))
    metadata = metadata_rows(frame)
    return {
        "pages": pages,
        "unique_pages": unique_pages,
        "bytes": pages * page_size,
        # Metadata records are in pages and bytes, apart here; not files.
        "metadata_pages": int(metadata.sum()),
        "metadata_devices": sorted(frame["path"][metadata].astype(str).unique()),
        "files": int(frame["path"][~metadata].nunique()),
        "duration_us": duration_us,
        # Bytes read per second of trace time: how fast the program pulled
        # pages from disk while it ran.
        "throughput_bytes_per_s": (pages * page_size / (duration_us / 1e6)
                                   if duration_us else None),
    }


def _split_runs(new_run, max_pages):
    """Start a new request at each run start and every max_pages pages."""
    n = len(new_run)
    run_id = np.cumsum(new_run) - 1
    run_first = np.flatnonzero(new_run)
    position = np.arange(n) - run_first[run_id]
    return new_run | (position % max_pages == 0)


def group_requests(frame, page_size=None,
                   max_request_bytes=DEFAULT_MAX_REQUEST_BYTES):
    """Group pages into requests in trace order, as replay does.

    Returns one row per request: path, offset, length, pages, first_ts_us.
    """
    page_size = page_size_of(frame, page_size)
    frame = read_records(frame)
    max_pages = max(1, max_request_bytes // page_size)
    n = len(frame)
    if n == 0:
        return pd.DataFrame({"path": pd.Categorical([]), "offset": [],
                             "length": [], "pages": [], "first_ts_us": []})
    codes = frame["path"].cat.codes.to_numpy()
    offset = frame["offset"].to_numpy()
    new_run = np.ones(n, dtype=bool)
    new_run[1:] = (codes[1:] != codes[:-1]) | \
        (offset[1:] != offset[:-1] + page_size)
    starts_mask = _split_runs(new_run, max_pages)
    starts = np.flatnonzero(starts_mask)
    pages = np.diff(np.append(starts, n))
    return pd.DataFrame({
        "path": frame["path"].iloc[starts].reset_index(drop=True),
        "offset": offset[starts],
        "length": pages * page_size,
        "pages": pages,
        "first_ts_us": frame["ts_us"].to_numpy()[starts],
    })


def sort_by_file(frame, page_size=None,
                 max_request_bytes=DEFAULT_MAX_REQUEST_BYTES):
    """Requests of `replay --sort=file`: each distinct page once, by path and
    offset, then grouped again."""
    unique = read_records(frame).drop_duplicates(["path", "offset"])
    # Sort by path name (not category code), as replay sorts strings.
    order = np.lexsort((unique["offset"].to_numpy(),
                        unique["path"].astype(str).to_numpy()))
    return group_requests(unique.iloc[order], page_size, max_request_bytes)


def file_seeks(requests):
    """Per request, in file-offset space: is it a seek, and how far.

    Returns a DataFrame with `seek` (bool), `switch` (bool: another file
    than the previous request) and `distance` (bytes; NaN for a switch and
    for the first request).
    """
    n = len(requests)
    codes = requests["path"].cat.codes.to_numpy() if n else np.array([])
    offset = requests["offset"].to_numpy(dtype=np.int64)
    end = offset + requests["length"].to_numpy(dtype=np.int64)
    seek = np.zeros(n, dtype=bool)
    switch = np.zeros(n, dtype=bool)
    distance = np.full(n, np.nan)
    if n > 1:
        switch[1:] = codes[1:] != codes[:-1]
        jump = offset[1:] - end[:-1]
        seek[1:] = switch[1:] | (jump != 0)
        distance[1:] = np.where(switch[1:], np.nan, np.abs(jump))
    return pd.DataFrame({"seek": seek, "switch": switch,
                         "distance": distance})


def physical_seeks(plan):
    """Per plan request, in physical space, per device.

    Returns `seek` (bool), `distance` (bytes; NaN where unknown: the first
    request on a device, or no physical offset). Falls back to file-offset
    space when the plan has no physical offsets at all.
    """
    physical = plan["physical_offset"]
    if physical.isna().all():
        return file_seeks(plan).drop(columns=["switch"])
    n = len(plan)
    seek = np.zeros(n, dtype=bool)
    distance = np.full(n, np.nan)
    known = ~physical.isna().to_numpy()
    start = physical.to_numpy(dtype=float, na_value=np.nan)
    end = start + plan["length"].to_numpy(dtype=float)
    dev = plan["dev"].astype(str).to_numpy()
    for device in pd.unique(dev[known]):
        rows = np.flatnonzero(known & (dev == device))
        jump = start[rows[1:]] - end[rows[:-1]]
        seek[rows[1:]] = jump != 0
        distance[rows[1:]] = np.abs(jump)
    return pd.DataFrame({"seek": seek, "distance": distance})


def sort_plan_physically(plan, max_request_bytes=DEFAULT_MAX_REQUEST_BYTES):
    """The plan in on-disk order, as `replay --sorted` issues it: per device
    by physical offset, requests that became adjacent merged again (up to
    max_request_bytes). Requests without a physical offset follow, by path
    and offset."""
    plan = plan.reset_index(drop=True)
    known = plan["physical_offset"].notna().to_numpy(dtype=bool)
    on_disk = plan.loc[known].sort_values(["dev", "physical_offset"],
                                          kind="stable")
    rest = plan.loc[~known]
    rest = rest.iloc[np.lexsort((rest["offset"].to_numpy(),
                                 rest["path"].astype(str).to_numpy()))]
    columns = ("path", "offset", "length", "dev", "physical_offset")
    merged = []  # lists of [path, offset, length, dev, physical_offset]
    rows = zip(on_disk["path"].astype(str), on_disk["offset"].tolist(),
               on_disk["length"].tolist(), on_disk["dev"].astype(str),
               on_disk["physical_offset"].tolist())
    for path, offset, length, dev, physical in rows:
        last = merged[-1] if merged else None
        # One read(2) covers one file, so only pieces of the same file that
        # are contiguous both in the file and on disk can merge.
        if (last is not None and last[3] == dev and last[0] == path
                and last[4] + last[2] == physical
                and last[1] + last[2] == offset
                and last[2] + length <= max_request_bytes):
            last[2] += length
            continue
        merged.append([path, offset, length, dev, physical])
    merged += [list(row) for row in zip(
        rest["path"].astype(str), rest["offset"].tolist(),
        rest["length"].tolist(), rest["dev"].astype(str),
        [None] * len(rest))]
    out = pd.DataFrame(merged, columns=list(columns))
    out.insert(0, "order", np.arange(len(out), dtype=np.int64))
    out["path"] = out["path"].astype(str).astype("category")
    out["dev"] = out["dev"].astype(str).astype("category")
    out["offset"] = out["offset"].astype(np.int64)
    out["length"] = out["length"].astype(np.int64)
    out["physical_offset"] = pd.array(
        [None if pd.isna(v) else int(v) for v in out["physical_offset"]],
        dtype="Int64")
    return out


def seek_summary(seeks, requests):
    """Counts and sums of a per-request seek table."""
    distance = seeks["distance"]
    summary = {
        "requests": int(len(requests)),
        "bytes": int(requests["length"].sum()),
        "mean_request_bytes": (float(requests["length"].mean())
                               if len(requests) else 0.0),
        "seeks": int(seeks["seek"].sum()),
        "seek_distance_bytes": int(distance[seeks["seek"]].fillna(0).sum()),
        "unknown_distance_seeks": int((seeks["seek"] & distance.isna()).sum()),
    }
    if "switch" in seeks:
        summary["file_switches"] = int(seeks["switch"].sum())
    return summary


def trace_seek_report(frame, page_size=None,
                      max_request_bytes=DEFAULT_MAX_REQUEST_BYTES):
    """Seek statistics of a trace in file-offset space, original order and
    sorted by file."""
    original = group_requests(frame, page_size, max_request_bytes)
    by_file = sort_by_file(frame, page_size, max_request_bytes)
    return {
        "original": seek_summary(file_seeks(original), original),
        "sorted": seek_summary(file_seeks(by_file), by_file),
    }


def plan_seek_report(plan, max_request_bytes=DEFAULT_MAX_REQUEST_BYTES):
    """Seek statistics of a plan in physical space, as given and sorted."""
    on_disk = sort_plan_physically(plan, max_request_bytes)
    return {
        "original": seek_summary(physical_seeks(plan), plan),
        "sorted": seek_summary(physical_seeks(on_disk), on_disk),
    }
