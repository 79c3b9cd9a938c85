"""Writing traces back out: the trace format itself, CSV, Parquet and fio
iolog v3."""
import warnings

import numpy as np
import pandas as pd

from . import metrics
from .escape import escape


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


def write_trace(frame, out, header=None):
    """Write `frame` as a trace (format v1) to the text stream `out`."""
    extra = list(frame.columns[3:])
    page_size = frame.attrs.get("page_size", 4096)
    out.write("# pagetrace-format: 1\n")
    out.write(f"# page-size: {page_size}\n# clock: realtime-us\n")
    out.write("# columns: timestamp_us path offset"
              + "".join(f" {c}" for c in extra) + "\n")
    for key, value in (header or {}).items():
        # `command` is escaped like a path (docs/trace-format.md); the other
        # values are plain text on one line.
        value = escape(value) if key == "command" else " ".join(
            str(value).split())
        out.write(f"# {key}: {value}\n")
    lines = _lines(frame, " ")
    if lines:
        out.write("\n".join(lines) + "\n")
    duration = int(frame["ts_us"].max() - frame["ts_us"].min()) \
        if len(frame) else 0
    out.write(f"# end: pages={len(frame)} bytes={len(frame) * page_size} "
              f"files={frame['path'].nunique()} duration_us={duration} "
              "lost=0\n")


def write_csv(frame, out):
    """CSV with the trace's columns; paths escaped, so no quoting."""
    names = ["timestamp_us"] + list(frame.columns[1:])
    out.write(",".join(names) + "\n")
    lines = _lines(frame, ",")
    if lines:
        out.write("\n".join(lines) + "\n")


def write_parquet(frame, path):
    """Parquet, for DuckDB or Spark. `path` and the string columns hold the
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
    """fio iolog version 3: the trace's reads, grouped into requests as
    replay groups them, each at its time in µs since the first read (fio
    writes v3 timestamps with utime_since_now(), so they are µs).

    Returns the number of requests skipped because fio cannot name their
    file.
    """
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
