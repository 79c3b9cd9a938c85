"""Writing traces back out: the trace format itself, CSV, Parquet and fio
iolog v3."""
import warnings

import numpy as np
import pandas as pd

from pagetrace.analysis import metrics
from pagetrace.core import tracewriter
from pagetrace.core.escape import escape
from pagetrace.core.tracefile import RECORD_KINDS


def _is_text(values):
    return isinstance(values.dtype, pd.CategoricalDtype) or \
        values.dtype.kind == "O"


def _column_text(frame, name):
    """A column as strings for a text file: strings escaped like paths
    (each distinct value once), missing values as "-"."""
    values = frame[name]
    if isinstance(values.dtype, pd.CategoricalDtype):
        # Code -1 (missing) picks the last entry, "-".
        escaped = np.array([escape(str(c)) for c in values.cat.categories]
                           + ["-"], dtype=object)
        return escaped[values.cat.codes.to_numpy()]
    if values.dtype.kind == "O":
        return np.array(["-" if pd.isna(v) else escape(str(v))
                         for v in values], dtype=object)
    return values.astype(str).to_numpy(dtype=object)


def _lines(frame, separator):
    """Each row as one line of text: the trace's columns, strings escaped."""
    columns = [frame["ts_us"].astype(str).to_numpy(dtype=object),
               _column_text(frame, "path"),
               frame["offset"].astype(str).to_numpy(dtype=object)]
    columns += [_column_text(frame, c) for c in frame.columns[3:]]
    lines = columns[0]
    for column in columns[1:]:
        lines = lines + separator + column
    return lines.tolist()


def _kinds_present(frame):
    """Record kinds of a version 2 frame in spec order; () when the frame
    holds only reads (no `kind` column, or every row `read`)."""
    if "kind" not in frame.columns:
        return ()
    present = set(frame["kind"].astype(str).unique())
    if present <= {"read"}:
        return ()
    return tuple(k for k in RECORD_KINDS if k in present | {"read"})


def write_trace(frame, out, header=None):
    """Write `frame` as a trace to the text stream `out`: format version 2
    when it holds `access` or `map` records, else version 1 (without the
    `kind` column), as `trace` itself does."""
    kinds = _kinds_present(frame)
    if not kinds and "kind" in frame.columns:
        frame = frame.drop(columns=["kind"])
    elif kinds:
        # Version 2 has `kind` in field 4, before any extra column.
        rest = [c for c in frame.columns[3:] if c != "kind"]
        frame = frame[list(frame.columns[:3]) + ["kind"] + rest]
    extra = list(frame.columns[3:])
    page_size = frame.attrs.get("page_size", 4096)
    out.write(tracewriter.header(page_size, extra, kinds or None, header))
    lines = _lines(frame, " ")
    if lines:
        out.write("\n".join(lines) + "\n")
    # The trailer counts pages read; v2 adds the access and map records.
    reads = metrics.read_records(frame)
    duration = int(frame["ts_us"].max() - frame["ts_us"].min()) \
        if len(frame) else 0
    used = {}
    if kinds:
        kind = frame["kind"]
        used = {"accessed": int((kind == "access").sum()),
                "mapped": int((kind == "map").sum())}
    out.write(tracewriter.trailer(len(reads), page_size,
                                  reads["path"].nunique(), duration, **used))


def write_csv(frame, out):
    """CSV with the trace's columns, `kind` included for a version 2 trace;
    paths escaped, so no quoting."""
    names = ["timestamp_us"] + list(frame.columns[1:])
    out.write(",".join(names) + "\n")
    lines = _lines(frame, ",")
    if lines:
        out.write("\n".join(lines) + "\n")


def write_parquet(frame, path):
    """Parquet, for DuckDB or Spark, with the trace's columns (`kind`
    included for a version 2 trace). `path` and the string columns hold the
    escaped form, as in every other file of the project: names that are
    not valid UTF-8 then still fit in a Parquet string."""
    import pyarrow as pa
    import pyarrow.parquet as pq
    columns = {"ts_us": pa.array(frame["ts_us"].to_numpy()),
               "offset": pa.array(frame["offset"].to_numpy())}
    for name in frame.columns:
        if name in columns:
            continue
        if _is_text(frame[name]):
            columns[name] = pa.array(_column_text(frame, name).tolist(),
                                     type=pa.string()).dictionary_encode()
        else:
            columns[name] = pa.array(frame[name].to_numpy())
    table = pa.table({name: columns[name] for name in frame.columns})
    pq.write_table(table, path)


def _fio_name_ok(path):
    # fio's iolog parser reads the file name with sscanf("%s"), so a name
    # with white space cannot be written; special `//` paths name no file.
    return not path.startswith("//") and not any(c.isspace() for c in path)


def write_fio_iolog(frame, out, max_request_bytes=metrics.DEFAULT_MAX_REQUEST_BYTES):
    """fio iolog version 3: the trace's reads (its `read` records),
    grouped into requests as replay groups them, each at its time in µs
    since the first read (fio writes v3 timestamps with utime_since_now(),
    so they are µs).

    Returns the number of requests skipped because fio cannot name their
    file.
    """
    frame = metrics.read_records(frame)
    requests = metrics.group_requests(frame, max_request_bytes=max_request_bytes)
    start = int(frame["ts_us"].min()) if len(frame) else 0
    usable = {p for p in requests["path"].astype(str) if _fio_name_ok(p)}
    skipped = int((~requests["path"].astype(str).isin(usable)).sum())
    if skipped:
        warnings.warn(f"fio iolog: {skipped} requests skipped (special paths "
                      "or names with white space)")
    out.write("fio version 3 iolog\n")
    order = [p for p in pd.unique(requests["path"].astype(str))
             if p in usable]
    for path in order:
        out.write(f"0 {path} add\n")
    for path in order:
        out.write(f"0 {path} open\n")
    last_us = 0
    for path, offset, length, ts_us in zip(
            requests["path"].astype(str), requests["offset"].tolist(),
            requests["length"].tolist(), requests["first_ts_us"].tolist()):
        if path not in usable:
            continue
        last_us = ts_us - start
        out.write(f"{last_us} {path} read {offset} {length}\n")
    for path in order:
        out.write(f"{last_us} {path} close\n")
    return skipped
