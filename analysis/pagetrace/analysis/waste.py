"""Read against used: which pages a program had read from storage and never
touched (issue 9).

A version 2 trace (`trace --used`, docs/trace-format.md) holds, besides the
`read` records, an `access` record for the first access of each page and a
`map` record for each page fault-around mapped without a fault. In the
words of the spec:

* used: a page with a `read` record and an `access` record;
* unused (waste): a page with a `read` record and no `access` record; the
  unused pages that have a `map` record are counted apart as *mapped*
  (possibly used without any event, so an upper bound of the waste);
* accessed but not read: an `access` record for a page the trace never
  read, a hit on a page already in the cache.

A page read more than once (reclaimed and read again) counts once, with
the cause of its first read. Waste is split by the read's `cause` column
when the trace has it (`trace -x`). Reads of file system metadata
(the path a device node under /dev/, `cause` = `metadata` with -x) are no
file's pages: they are counted apart.
"""
import argparse

import numpy as np
import pandas as pd

from pagetrace.core.escape import escape
from pagetrace.analysis.metrics import page_size_of, read_records
from pagetrace.core.tracefile import is_metadata
# The order causes are listed in when they waste as much (docs/trace-format.md).
CAUSE_ORDER = ("sync_ra", "async_ra", "fault", "forced_ra", "read", "-")
RECORD_HINT = "record one with trace --used -c CMD"


class NoAccessRecordsError(ValueError):
    """The trace says nothing about which pages were used."""


def has_access_records(frame):
    """True when `frame` holds at least one `access` record."""
    return "kind" in frame.columns and bool((frame["kind"] == "access").any())


def _require_access_records(frame):
    if has_access_records(frame):
        return
    version = frame.attrs.get("version")
    which = f"a version {version} trace" if version else "this trace"
    raise NoAccessRecordsError(
        f"no access records in {which}, so used pages cannot be told from "
        f"unused ones; {RECORD_HINT}")


def _page_keys(frame):
    """One int64 per row naming its page: equal for the same page of the
    same file whatever the record kind (the codes of one frame's `path`
    categorical name the same file in every row)."""
    codes = frame["path"].cat.codes.to_numpy().astype(np.int64)
    pages = frame["offset"].to_numpy() // page_size_of(frame)
    span = int(pages.max()) + 1 if len(pages) else 1
    if span * (int(codes.max(initial=0)) + 1) < 2**62:
        return codes * span + pages
    # Offsets too large to pack with the file: number the pairs instead.
    return pd.MultiIndex.from_arrays([codes, pages]).factorize()[0]


class _Usage:
    """What page_usage and waste_summary share: the first read of each page
    (`rows`, positions in the frame), whether it was used or only mapped,
    and the path codes of the pages accessed but never read."""

    def __init__(self, frame):
        _require_access_records(frame)
        keys = _page_keys(frame)
        kind = frame["kind"]
        is_read = (kind == "read").to_numpy()
        access_keys = keys[(kind == "access").to_numpy()]
        map_keys = keys[(kind == "map").to_numpy()]
        read_rows = np.flatnonzero(is_read)
        # A page reclaimed and read again counts once, as first read.
        first = ~pd.Series(keys[read_rows]).duplicated().to_numpy()
        self.rows = read_rows[first]
        read_keys = pd.Series(keys[self.rows])
        self.used = read_keys.isin(access_keys).to_numpy()
        self.mapped = ~self.used & read_keys.isin(map_keys).to_numpy()
        accessed = pd.Series(access_keys).drop_duplicates()
        not_read = ~accessed.isin(read_keys).to_numpy()
        access_codes = frame["path"].cat.codes.to_numpy()[
            (kind == "access").to_numpy()]
        self.cached_codes = access_codes[accessed.index.to_numpy()[not_read]]


def page_usage(frame):
    """One row per page read: `ts_us` (its first read), `path`, `offset`,
    `cause` (of its first read; missing without `trace -x`), `used`
    (accessed) and `mapped` (unused, but fault-around mapped it).

    Rows are in the order of the first reads; metadata reads (cause
    `metadata`) are rows too, which waste_summary counts apart. Raises
    NoAccessRecordsError when the trace has no `access` record (version 1,
    or `--used` not given).
    """
    usage = _Usage(frame)
    pages = frame.iloc[usage.rows]
    cause = pages["cause"] if "cause" in frame.columns else \
        pd.Categorical([None] * len(pages))
    table = pd.DataFrame({
        "ts_us": pages["ts_us"].to_numpy(),
        "path": pages["path"].cat.remove_unused_categories().to_numpy(),
        "offset": pages["offset"].to_numpy(),
        "cause": pd.Categorical(cause).remove_unused_categories(),
        "used": usage.used, "mapped": usage.mapped})
    table.attrs["page_size"] = page_size_of(frame)
    return table


def _by_cause(counts, names):
    """{cause: pages} of the non-zero counts, most first, ties in
    CAUSE_ORDER then by name."""
    rank = {c: i for i, c in enumerate(CAUSE_ORDER)}
    found = [(names[i], int(n)) for i, n in enumerate(counts) if n]
    found.sort(key=lambda item: (-item[1], rank.get(item[0], len(rank)),
                                 item[0]))
    return dict(found)


def waste_summary(frame):
    """Pages read, used, unused, mapped and accessed but not read, in total
    and per file (most unused pages first), as a JSON-ready dict:

        {"page_size", "has_cause", "read_pages", "used_pages",
         "unused_pages", "mapped_pages", "unused_by_cause",
         "accessed_not_read_pages", "files": [{"path", "read_pages",
         "used_pages", "unused_pages", "mapped_pages", "unused_by_cause",
         "accessed_not_read_pages"}, ...],
         "metadata": {"read_pages", "files": [{"path", "read_pages"}]}}

    Counts are distinct pages. `unused_by_cause` is {} (and has_cause
    False) when the trace has no `cause` column. Metadata reads are left
    out of everything but "metadata". Raises NoAccessRecordsError when the
    trace has no `access` record.
    """
    usage = _Usage(frame)
    paths = list(frame["path"].cat.categories)
    # int64: the codes are int8 for up to 127 files, too small for the
    # file × cause index below.
    codes = frame["path"].cat.codes.to_numpy()[usage.rows].astype(np.int64)
    has_cause = "cause" in frame.columns
    if has_cause:
        causes = list(frame["cause"].cat.categories.astype(str)) + ["-"]
        # A missing cause (a short record) counts as unknown, "-".
        cause = frame["cause"].cat.codes.to_numpy()[usage.rows].astype(
            np.int64) % len(causes)
    else:
        causes, cause = ["-"], np.zeros(len(codes), dtype=np.int64)
    # The spec's one rule: a metadata record's path is a device node.
    metadata = np.array([is_metadata(p) for p in paths] + [False],
                        dtype=bool)[codes]

    def per_path(mask):
        return np.bincount(codes[mask], minlength=len(paths))
    count_read = per_path(~metadata)
    count_used = per_path(~metadata & usage.used)
    count_mapped = per_path(~metadata & usage.mapped)
    count_cached = np.bincount(usage.cached_codes, minlength=len(paths))
    wasted = ~metadata & ~usage.used
    by_cause = np.bincount(codes[wasted] * len(causes) + cause[wasted],
                           minlength=len(paths) * len(causes)
                           ).reshape(len(paths), len(causes))
    files = []
    # In order of first read, then the files only accessed.
    for code in pd.unique(np.concatenate([codes[~metadata],
                                          usage.cached_codes])):
        entry = {"path": paths[code], "read_pages": int(count_read[code]),
                 "used_pages": int(count_used[code]),
                 "unused_pages": int(count_read[code] - count_used[code]),
                 "mapped_pages": int(count_mapped[code])}
        if has_cause:
            entry["unused_by_cause"] = _by_cause(by_cause[code], causes)
        entry["accessed_not_read_pages"] = int(count_cached[code])
        files.append(entry)
    # Largest waste first; then most read; then in order of first read.
    files.sort(key=lambda f: (-f["unused_pages"], -f["read_pages"]))
    metadata_read = per_path(metadata)
    return {
        "page_size": page_size_of(frame),
        "has_cause": has_cause,
        "read_pages": int(count_read.sum()),
        "used_pages": int(count_used.sum()),
        "unused_pages": int(count_read.sum() - count_used.sum()),
        "mapped_pages": int(count_mapped.sum()),
        "unused_by_cause": (_by_cause(by_cause.sum(axis=0), causes)
                            if has_cause else {}),
        "accessed_not_read_pages": int(count_cached.sum()),
        "files": files,
        "metadata": {
            "read_pages": int(metadata_read.sum()),
            "files": [{"path": paths[code], "read_pages": int(metadata_read[code])}
                      for code in pd.unique(codes[metadata])]},
    }


# --- text -------------------------------------------------------------

def positive_int(text):
    """argparse type of --top."""
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"not a positive integer: {text!r}")
    return value


def _mib(pages, page_size):
    return f"{pages * page_size / 2**20:,.3f}"


def _pages(n):
    return f"{n:,} page" + ("" if n == 1 else "s")


def _share(part, whole):
    return f"{100.0 * part / whole:.1f}%" if whole else "-"


def waste_rows(summary, top=None):
    """(header, rows) of the per-file table, sizes in MiB: the `top` files
    with the most unused pages (all by default), then one row for the rest
    if any, then the totals. Paths escaped as in traces."""
    size = summary["page_size"]
    header = ["path", "read MiB", "used MiB", "unused MiB", "unused %",
              "mapped MiB", "cached MiB"]

    def row(name, f):
        return [name, _mib(f["read_pages"], size), _mib(f["used_pages"], size),
                _mib(f["unused_pages"], size),
                _share(f["unused_pages"], f["read_pages"]),
                _mib(f["mapped_pages"], size),
                _mib(f["accessed_not_read_pages"], size)]
    files = summary["files"]
    shown = files if top is None else files[:top]
    rows = [row(escape(f["path"]), f) for f in shown]
    rest = files[len(shown):]
    if rest:
        keys = ("read_pages", "used_pages", "unused_pages", "mapped_pages",
                "accessed_not_read_pages")
        rows.append(row(f"({len(rest)} more files)",
                        {k: sum(f[k] for f in rest) for k in keys}))
    rows.append(row("total", summary))
    return header, rows


def waste_text(summary, top=None):
    """The lines printed after the table: totals in words, waste by cause,
    metadata."""
    size = summary["page_size"]
    read, unused = summary["read_pages"], summary["unused_pages"]
    lines = [
        f"read {read:,} pages ({_mib(read, size)} MiB): "
        f"{summary['used_pages']:,} used ({_share(summary['used_pages'], read)}), "
        f"{unused:,} unused ({_share(unused, read)}, {_mib(unused, size)} MiB), "
        f"of which {summary['mapped_pages']:,} mapped by fault-around "
        "(possibly used)",
        "accessed but not read (already cached, column 'cached'): "
        f"{_pages(summary['accessed_not_read_pages'])}"]
    if summary["has_cause"]:
        causes = ", ".join(f"{cause} {pages:,} ({_share(pages, unused)})"
                           for cause, pages in
                           summary["unused_by_cause"].items() if pages)
        lines.append(f"unused by cause: {causes or 'none'}")
    else:
        lines.append("unused by cause: not recorded (trace -x adds the "
                     "cause column)")
    metadata = summary["metadata"]
    if metadata["read_pages"]:
        lines.append(f"metadata (not counted above): "
                     f"{_pages(metadata['read_pages'])} "
                     f"({_mib(metadata['read_pages'], size)} MiB) from "
                     + ", ".join(escape(f["path"]) for f in metadata["files"]))
    return "\n".join(lines) + "\n"
