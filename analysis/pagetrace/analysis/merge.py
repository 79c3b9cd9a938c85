"""Several runs' traces together: their union, and their differences.

Both are about pages read from storage: of a version 2 trace only the
`read` records count.
"""
import numpy as np
import pandas as pd

from pagetrace.analysis.metrics import read_records


def merge_traces(frames):
    """Union of several traces of the same program.

    Each page keeps its earliest time relative to the start of its own run
    (the way iorap's trace compiler merges runs), and `runs` says in how
    many of the traces it appeared: a page read by every run is stable, one
    read by a single run is noise or a one-off. Rows are in order of that
    earliest relative time, so the result is itself a trace (timestamps
    start at 0).
    """
    parts = []
    for run, frame in enumerate(frames):
        frame = read_records(frame)
        relative = frame["ts_us"].to_numpy() - (
            frame["ts_us"].min() if len(frame) else 0)
        parts.append(pd.DataFrame({
            "ts_us": relative, "path": frame["path"].astype(str).to_numpy(),
            "offset": frame["offset"].to_numpy(), "run": run}))
    union = pd.concat(parts, ignore_index=True)
    grouped = union.groupby(["path", "offset"], sort=False)
    merged = pd.DataFrame({"ts_us": grouped["ts_us"].min(),
                           "runs": grouped["run"].nunique()}).reset_index()
    merged = merged.sort_values(["ts_us", "path", "offset"], kind="stable",
                                ignore_index=True)
    merged["path"] = pd.Categorical(merged["path"],
                                    categories=pd.unique(merged["path"]))
    merged = merged[["ts_us", "path", "offset", "runs"]]
    page_sizes = {f.attrs.get("page_size", 4096) for f in frames}
    if len(page_sizes) > 1:
        raise ValueError(f"traces have different page sizes: {page_sizes}")
    merged.attrs["page_size"] = page_sizes.pop() if page_sizes else 4096
    merged.attrs["n_runs"] = len(frames)
    return merged


def stability(merged):
    """How many pages appeared in exactly k of the runs, k = 1..n."""
    n_runs = merged.attrs.get("n_runs", int(merged["runs"].max()))
    counts = merged["runs"].value_counts().reindex(
        range(1, n_runs + 1), fill_value=0)
    return pd.DataFrame({"pages": counts.to_numpy(),
                         "share": counts.to_numpy() / max(1, len(merged))},
                        index=pd.Index(counts.index, name="runs"))


def diff_traces(a, b):
    """Per file: distinct pages only in A, only in B, and in both."""
    def pages(frame):
        frame = read_records(frame)
        return pd.DataFrame({"path": frame["path"].astype(str).to_numpy(),
                             "offset": frame["offset"].to_numpy()}
                            ).drop_duplicates()
    both = pages(a).merge(pages(b), how="outer", on=["path", "offset"],
                          indicator=True)
    table = pd.crosstab(both["path"], both["_merge"]).reindex(
        columns=["left_only", "right_only", "both"], fill_value=0)
    table.columns = ["only_a", "only_b", "both"]
    table.index.name = "path"
    table = table.astype(np.int64)
    return table.sort_values(["only_a", "only_b", "both"], ascending=False,
                             kind="stable")
