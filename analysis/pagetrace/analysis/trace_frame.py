"""The pandas reader of pagetrace traces, versions 1 and 2
(docs/trace-format.md).

`read_trace` returns a DataFrame with one row per record: `ts_us`, `path`
(categorical), `offset`, `kind` (categorical with the categories `read`,
`access`, `map`; every record of a version 1 trace is `read`), then the
trace's extra columns (categorical strings). `ts_us` and `offset` are int64,
or uint64 in the rare trace that holds a value above 2**63 - 1. What the
file said besides its records is in `df.attrs`: `version`, `page_size`,
`header`, `columns`, `trailer`, `malformed` (a list of `(line, reason)`),
`warnings` and `engine`.

The rules are the core's (`pagetrace.core.tracefile`, standard library only):
the header is read and the whole file refused or accepted by
`tracefile.read_header`, and every record line that is flagged is judged
and worded by `tracefile.check_record`. Two engines find the records:

* "arrow", the fast one: pyarrow's CSV reader splits fields on single
  spaces and dictionary-encodes paths, and the easy checks run vectorised
  over whole columns. It only decides that ordinary rows are valid; every
  row that fails a vectorised check goes to the core's check, which decides
  and words the reason.
* "python": the core's line iterator and check on every line. The arrow
  engine gives way to it whenever the file is outside what the fast path
  handles (runs of separators, rows with a varying number of fields,
  carriage returns), so the result never depends on which engine ran, only
  the speed does.
"""
import importlib.util
import warnings
from dataclasses import dataclass, replace

import numpy as np
import pandas as pd

from pagetrace.core import tracefile
from pagetrace.core.escape import EscapeError, unescape_bytes
from pagetrace.core.tracefile import (RECORD_KINDS, MalformedRecord,
                                      MalformedTraceError, TraceError,
                                      TraceWarning, UnsupportedVersionError,
                                      check_record)

__all__ = ["MalformedTraceError", "TraceError", "TraceWarning",
           "UnsupportedVersionError", "expected_json", "parse_trace_bytes",
           "read_trace", "trace_records", "extra_columns"]

KNOWN_VERSIONS = tracefile.KNOWN_VERSIONS
DEFAULT_PAGE_SIZE = tracefile.DEFAULT_PAGE_SIZE
# Names of the first four columns in the DataFrame.
FRAME_BASE_COLUMNS = ("ts_us", "path", "offset", "kind")
INT64_MAX = 2**63 - 1
# Decimal strings this long or shorter always fit in an int64.
SAFE_DIGITS = 18
WARN_LINES = tracefile.WARN_LINES
# When the arrow engine cannot read a whole file, it is read again in
# pieces of about this size, and only the pieces it cannot read go to the
# (ten times slower) python engine.
CHUNK_BYTES = 16 << 20
KIND_DTYPE = pd.CategoricalDtype(list(RECORD_KINDS))


@dataclass
class _Layout:
    """The core's header, and the byte range of the records."""
    header: tracefile.TraceHeader
    body_start: int       # byte offset of the first line after the header
    body_line: int        # its 1-based line number
    body_end: int         # byte offset where the trailing comments start

    @property
    def first_field(self):
        """1-based field number of the first extra column."""
        return self.header.first_extra + 1

    @property
    def extra_names(self):
        return _frame_names(self.header.extra_names, self.first_field)


def _scan_layout(data, source):
    """The header (refusing the file if the core does), and where the
    comment block at the end starts."""
    header = tracefile.read_header(data, source)
    body_start = header.body_start
    body_end = len(data)
    while body_end > body_start:
        line_end = body_end - 1 if data[body_end - 1:body_end] == b"\n" \
            else body_end
        start = max(data.rfind(b"\n", body_start, line_end) + 1, body_start)
        raw = data[start:line_end]
        if not (raw.startswith(b"#") or tracefile.is_blank(raw)):
            break
        body_end = start
    return _Layout(header=header, body_start=body_start,
                   body_line=header.body_line, body_end=body_end)


def _frame_names(declared, first_field):
    """DataFrame names of the extra columns: as declared, except that a
    name already taken (a repeat, or ts_us/path/offset/kind) becomes
    fieldN, N its 1-based field number (`first_field` for the first)."""
    names = []
    for index, name in enumerate(declared):
        taken = name in names or name in FRAME_BASE_COLUMNS
        names.append(f"field{index + first_field}" if taken else name)
    return names


def _extra_name(extra_names, index, first_field):
    """Name of extra column `index` (0-based); `first_field` is the 1-based
    field number of the first extra column (4, or 5 in version 2)."""
    if index < len(extra_names):
        return extra_names[index]
    return f"field{index + first_field}"


def _categorical(values):
    """Categorical with categories in order of first appearance."""
    return pd.Categorical(values, categories=pd.unique(
        pd.Series([v for v in values if v is not None], dtype=object)))


def _integers(values):
    """int64, or uint64 when a value does not fit in an int64."""
    array = np.asarray(values, dtype=np.uint64)
    if len(array) and int(array.max()) > INT64_MAX:
        return array
    return array.astype(np.int64)


def _frame(ts_us, path, offset, kind, extras, layout):
    columns = {"ts_us": ts_us, "path": path, "offset": offset, "kind": kind}
    for index, values in enumerate(extras):
        columns[_extra_name(layout.extra_names, index,
                            layout.first_field)] = values
    # copy=False: no consolidation copy of the two integer columns.
    return pd.DataFrame(columns, copy=False)


def _kind_column(kinds, n_rows):
    if kinds is None:   # version 1: every record was read from storage
        return pd.Categorical.from_codes(np.zeros(n_rows, dtype=np.int8),
                                         dtype=KIND_DTYPE)
    return pd.Categorical(kinds, dtype=KIND_DTYPE)


def _read_python(data, layout):
    """The core's line iterator and check on every line."""
    header = layout.header
    ts_col, path_col, offset_col, kind_col, extra_rows = [], [], [], [], []
    malformed = []
    n_extra = 0
    for line_no, fields, crlf in tracefile.record_lines(
            data, layout.body_start, layout.body_line, layout.body_end):
        try:
            ts_us, path, offset, kind, extras = check_record(fields, header,
                                                             crlf)
        except MalformedRecord as err:
            malformed.append((line_no, str(err)))
            continue
        ts_col.append(ts_us)
        path_col.append(path)
        offset_col.append(offset)
        kind_col.append(kind)
        extra_rows.append(extras)
        n_extra = max(n_extra, len(extras))
    n_extra = max(n_extra, len(layout.extra_names))
    extras = [_categorical([e[i] if i < len(e) else None
                            for e in extra_rows]) for i in range(n_extra)]
    frame = _frame(_integers(ts_col), _categorical(path_col),
                   _integers(offset_col),
                   _kind_column(kind_col if header.version >= 2 else None,
                                len(kind_col)),
                   extras, layout)
    return frame, malformed


class _NotForArrow(Exception):
    """The body has a shape the arrow engine leaves to the python engine."""

    def __init__(self, reason, maybe_empty_lines=False):
        super().__init__(reason)
        self.maybe_empty_lines = maybe_empty_lines


def _body_segments(data, layout, careful):
    """Byte ranges of record lines, and the 1-based line number of each row
    (None when the rows simply follow the header).

    Mid-file comment and empty lines are cut out here, because the CSV
    reader would take them for records. Unless `careful`, a body without
    any `#` is taken as one range; empty lines then make the CSV reader
    fail, and the caller comes back with `careful`.
    """
    start, end = layout.body_start, layout.body_end
    if not careful and data.find(b"#", start, end) == -1:
        return [(start, end)], None
    if start >= end:
        return [], np.zeros(0, dtype=np.int64)
    body = np.frombuffer(data, dtype=np.uint8, count=end - start, offset=start)
    line_ends = np.flatnonzero(body == ord("\n"))
    line_starts = np.concatenate(([0], line_ends + 1))
    if len(line_ends) == 0 or line_ends[-1] != len(body) - 1:
        line_ends = np.concatenate((line_ends, [len(body)]))
    else:
        line_starts = line_starts[:-1]
    # Every start is inside the body: a start at its very end (after the
    # final newline) was dropped above.
    first_byte = body[line_starts]
    skipped = (first_byte == ord("#")) | (line_starts == line_ends)
    keep = ~skipped
    line_numbers = layout.body_line + np.flatnonzero(keep)
    # Contiguous runs of kept lines become one segment each.
    kept = np.flatnonzero(keep)
    if len(kept) == 0:
        return [], line_numbers
    breaks = np.flatnonzero(np.diff(kept) != 1)
    run_first = np.concatenate(([kept[0]], kept[breaks + 1]))
    run_last = np.concatenate((kept[breaks], [kept[-1]]))
    # +1 takes the newline; the last line may have none.
    segments = [(start + int(line_starts[a]),
                 min(start + int(line_ends[b]) + 1, end))
                for a, b in zip(run_first, run_last)]
    return segments, line_numbers


def _dictionary_column(column):
    """Dictionary-encoded arrow column -> (int codes, list of raw bytes)."""
    column = column.unify_dictionaries()
    if column.num_chunks == 0:
        return np.zeros(0, dtype=np.int64), []
    codes = np.concatenate([chunk.indices.to_numpy(zero_copy_only=False)
                            for chunk in column.chunks]).astype(np.int64)
    return codes, column.chunk(0).dictionary.to_pylist()


def _unescape_categories(raw_values):
    """Unescape each distinct raw value; None where the escape is bad."""
    out = []
    for raw in raw_values:
        if raw == b"":
            # An empty field means a run of separators, which the CSV reader
            # does not collapse.
            raise _NotForArrow("runs of separators")
        try:
            out.append(unescape_bytes(raw).decode("utf-8", "surrogateescape"))
        except EscapeError:
            out.append(None)
    return out


def _recode(codes, values, keep):
    """Categorical of the kept rows, categories deduplicated in order and
    limited to those still used."""
    kept_codes = codes if keep is None else codes[keep]
    used = np.bincount(kept_codes, minlength=len(values)) > 0
    # Unused values get no category; equal values (two spellings of one
    # path) share one.
    used_values = pd.Series([v for v, u in zip(values, used) if u],
                            dtype=object)
    inverse, uniques = pd.factorize(used_values)
    mapping = np.full(len(values), -1, dtype=np.int32)
    mapping[used] = inverse
    return pd.Categorical.from_codes(
        mapping[kept_codes], categories=pd.Index(uniques, dtype=object),
        validate=False)


def _read_arrow(data, layout):
    """Fast engine; raises _NotForArrow when the python engine must run
    (pyarrow is optional: Debian 12 has none)."""
    if importlib.util.find_spec("pyarrow") is None:
        raise _NotForArrow("no pyarrow")
    start, end = layout.body_start, layout.body_end
    # Single-byte searches run at memchr speed; the rarer shapes cost more.
    if data.find(b"\r", start, end) != -1:
        raise _NotForArrow("carriage returns")
    try:
        return _read_arrow_segments(data, layout, careful=False)
    except _NotForArrow as err:
        if not err.maybe_empty_lines:
            raise
        # Perhaps only empty lines in the middle; cut them out and retry.
        return _read_arrow_segments(data, layout, careful=True)


def _empty_frame(layout):
    n_extra = len(layout.extra_names)
    return _frame(np.zeros(0, dtype=np.int64), _categorical([]),
                  np.zeros(0, dtype=np.int64), _kind_column(None, 0),
                  [_categorical([]) for _ in range(n_extra)], layout)


def _read_arrow_segments(data, layout, careful):
    import pyarrow as pa
    import pyarrow.csv as pacsv

    segments, line_numbers = _body_segments(data, layout, careful)
    if sum(b - a for a, b in segments) == 0:
        # Nothing to read. The CSV reader is never given empty input: it
        # fails on it, and fails leaving its read-ahead task running
        # (apache/arrow#38676), which aborts the interpreter at exit.
        return _empty_frame(layout), []
    has_tabs = any(data.find(b"\t", a, b) != -1 for a, b in segments)
    if len(segments) == 1 and not has_tabs:
        body = pa.py_buffer(data).slice(segments[0][0],
                                        segments[0][1] - segments[0][0])
    else:
        joined = b"".join(data[a:b] for a, b in segments)
        body = pa.py_buffer(joined.replace(b"\t", b" ") if has_tabs
                            else joined)
    text_names = (["path", "kind"] if layout.header.version >= 2
                  else ["path"]) + list(layout.extra_names)
    names = ["ts_us"] + text_names[:1] + ["offset"] + text_names[1:]
    dictionary = pa.dictionary(pa.int32(), pa.binary())
    column_types = {"ts_us": pa.binary(), "offset": pa.binary()}
    column_types.update({name: dictionary for name in text_names})
    try:
        table = pacsv.read_csv(
            pa.BufferReader(body),
            # use_threads=False: the threaded reader leaves a read-ahead
            # task on Arrow's I/O thread pool running after it returns;
            # when the interpreter exits meanwhile, the process dies with
            # "terminate called without an active exception" (SIGABRT).
            # One thread reads as fast here (measured on 5M records).
            read_options=pacsv.ReadOptions(column_names=names,
                                           block_size=16 << 20,
                                           use_threads=False),
            parse_options=pacsv.ParseOptions(delimiter=" ", quote_char=False,
                                             escape_char=False,
                                             ignore_empty_lines=False),
            convert_options=pacsv.ConvertOptions(
                column_types=column_types, check_utf8=False,
                null_values=[], strings_can_be_null=False,
                quoted_strings_can_be_null=False))
    except pa.ArrowInvalid as err:
        # Typically a row with another number of fields than the header's.
        raise _NotForArrow(str(err)) from None
    n_rows = table.num_rows
    if line_numbers is None:
        line_numbers = layout.body_line + np.arange(n_rows)
    elif len(line_numbers) != n_rows:
        raise _NotForArrow("rows and lines do not match")
    suspect = np.zeros(n_rows, dtype=bool)
    numbers = {name: _arrow_integers(table.column(name), suspect)
               for name in ("ts_us", "offset")}
    suspect |= (numbers["offset"] & (layout.header.page_size - 1)) != 0
    coded = {}
    for name in text_names:
        codes, raw_values = _dictionary_column(table.column(name))
        values = _unescape_categories(raw_values)
        if name == "kind":
            values = [v if v in layout.header.kinds else None for v in values]
        bad = np.array([v is None for v in values], dtype=bool)
        if bad.any():
            suspect |= bad[codes]
        coded[name] = (codes, raw_values, values)
    malformed, keep = _judge_suspects(table, coded, numbers, suspect,
                                      line_numbers, layout)
    return _arrow_frame(coded, numbers, keep, layout), malformed


def _arrow_integers(text, suspect):
    """A column of decimal text as int64. Fields that are not plain
    numbers of at most SAFE_DIGITS digits become 0 and are marked in
    `suspect`, for the core's check to judge."""
    import pyarrow as pa
    import pyarrow.compute as pc

    lengths = pc.binary_length(text).to_numpy(zero_copy_only=False)
    if (lengths == 0).any():
        # Runs of separators, or empty lines (arrow reads one as a row of
        # empty fields): worth a retry with empty lines cut out.
        raise _NotForArrow("empty fields", maybe_empty_lines=True)
    # Unchecked cast: a field with bytes that are not UTF-8 is simply not
    # decimal.
    as_text = pc.cast(text, options=pc.CastOptions(
        target_type=pa.string(), allow_invalid_utf8=True))
    plain = pc.ascii_is_decimal(as_text).to_numpy(zero_copy_only=False) \
        & (lengths <= SAFE_DIGITS)
    if not plain.all():
        suspect |= ~plain
        as_text = pc.if_else(pa.array(plain), as_text, "0")
    return pc.cast(as_text, pa.int64()).to_numpy(zero_copy_only=False)


def _judge_suspects(table, coded, numbers, suspect, line_numbers, layout):
    """The core's check decides about every suspect row and words the
    reasons. Returns (malformed, keep); fixes up `numbers` in place for
    suspects that were valid after all (19 or 20 digits that fit)."""
    malformed = []
    keep = ~suspect
    suspects = np.flatnonzero(suspect)
    if len(suspects):
        # Arrow hands out read-only arrays; suspects may need fixing up.
        for name in numbers:
            numbers[name] = numbers[name].copy()
    text_names = list(coded)
    for row in suspects:
        raw = {name: coded[name][1][coded[name][0][row]]
               for name in text_names}
        fields = [table.column("ts_us")[row].as_py(), raw["path"],
                  table.column("offset")[row].as_py()]
        fields += [raw[name] for name in text_names[1:]]
        try:
            ts_us, _, offset, _, _ = check_record(fields, layout.header)
        except MalformedRecord as err:
            malformed.append((int(line_numbers[row]), str(err)))
            continue
        for name, value in (("ts_us", ts_us), ("offset", offset)):
            if value > INT64_MAX and numbers[name].dtype != np.uint64:
                numbers[name] = numbers[name].astype(np.uint64)
            numbers[name][row] = value
        keep[row] = True
    return malformed, (None if keep.all() else keep)


def _arrow_frame(coded, numbers, keep, layout):
    def kept(values):
        return values if keep is None else values[keep]

    if "kind" in coded:
        codes, _, values = coded["kind"]
        to_kind = np.array([RECORD_KINDS.index(v) if v is not None else -1
                            for v in values], dtype=np.int8)
        kind = pd.Categorical.from_codes(kept(to_kind[codes]) if len(codes)
                                         else np.zeros(0, dtype=np.int8),
                                         dtype=KIND_DTYPE)
    else:
        kind = _kind_column(None, len(kept(numbers["ts_us"])))
    extras = [_recode(*coded[name][::2], keep) for name in layout.extra_names]
    return _frame(kept(numbers["ts_us"]),
                  _recode(coded["path"][0], coded["path"][2], keep),
                  kept(numbers["offset"]), kind, extras, layout)


def _read_either(data, layout):
    """Arrow if it can, else python: (frame, malformed, engine)."""
    try:
        return (*_read_arrow(data, layout), "arrow")
    except _NotForArrow:
        return (*_read_python(data, layout), "python")


def _chunks(data, layout):
    """Sub-layouts of about CHUNK_BYTES each, cut at line boundaries."""
    start, line = layout.body_start, layout.body_line
    while start < layout.body_end:
        target = start + CHUNK_BYTES
        end = data.find(b"\n", target, layout.body_end) \
            if target < layout.body_end else -1
        end = layout.body_end if end == -1 else end + 1
        yield replace(layout, body_start=start, body_end=end, body_line=line)
        line += data.count(b"\n", start, end)
        start = end


def _read_in_chunks(data, layout):
    """The whole body with arrow; failing that, piece by piece."""
    if layout.body_end - layout.body_start <= CHUNK_BYTES:
        return _read_either(data, layout)
    try:
        return (*_read_arrow(data, layout), "arrow")
    except _NotForArrow:
        pass
    parts = [_read_either(data, chunk) for chunk in _chunks(data, layout)]
    engines = {engine for _, _, engine in parts}
    frame = _concat_frames([frame for frame, _, _ in parts])
    malformed = [m for _, bad, _ in parts for m in bad]
    return frame, malformed, engines.pop() if len(engines) == 1 else "mixed"


def _concat_frames(frames):
    """Concatenate per-chunk frames; categoricals are unioned (categories
    in order of first appearance), columns a chunk lacks are missing."""
    columns = []
    for frame in frames:
        columns += [c for c in frame.columns if c not in columns]
    joined = {}
    for name in columns:
        if name in ("ts_us", "offset"):
            joined[name] = np.concatenate([f[name].to_numpy() for f in frames])
            continue
        no_categories = pd.Index([], dtype=object)
        pieces = [pd.Categorical(f[name].array) if name in f.columns else
                  pd.Categorical([None] * len(f), categories=no_categories)
                  for f in frames]
        joined[name] = pd.api.types.union_categoricals(pieces)
    return pd.DataFrame(joined, copy=False)


def read_trace(path, strict=False, engine="auto"):
    """Read a pagetrace trace (format version 1 or 2) into a DataFrame.

    path: a trace file; `.xz` and `.gz` files are decompressed.
    strict: raise MalformedTraceError at the first malformed record instead
    of skipping it with a warning.
    engine: "auto" (arrow, giving way to python where needed), "arrow"
    (same), or "python" (the core's line-by-line check only).
    Raises TraceError (`SOURCE: reason`) for a file that is refused whole
    or cannot be read.
    """
    return parse_trace_bytes(tracefile.load(path), source=str(path),
                             strict=strict, engine=engine)


def parse_trace_bytes(data, source="<bytes>", strict=False, engine="auto"):
    """`read_trace` for a trace already in memory."""
    if engine not in ("auto", "arrow", "python"):
        raise ValueError(f"unknown engine {engine!r}")
    layout = _scan_layout(data, source)
    if engine == "python":
        frame, malformed = _read_python(data, layout)
        used = "python"
    else:
        frame, malformed, used = _read_in_chunks(data, layout)
    malformed.sort()
    header = layout.header
    trailer = tracefile.find_trailer(data, header)
    if strict and malformed:
        raise MalformedTraceError(source, *malformed[0])
    messages = [f"{source}:{line}: {reason}" for line, reason in malformed]
    lost = (trailer or {}).get("lost", 0)
    if lost > 0:
        messages.append(f"{source}: the tracer lost {lost} events; "
                        "the trace is incomplete")
    for message in messages[:WARN_LINES]:
        warnings.warn(message, TraceWarning, stacklevel=3)
    if len(messages) > WARN_LINES:
        warnings.warn(f"{source}: {len(messages) - WARN_LINES} more "
                      "warnings (see df.attrs['warnings'])", TraceWarning,
                      stacklevel=3)
    frame.attrs.update({
        "source": source, "version": header.version,
        "page_size": header.page_size, "header": dict(header.keys),
        "columns": list(header.columns), "kinds": sorted(
            header.kinds, key=RECORD_KINDS.index),
        "trailer": trailer, "malformed": malformed,
        "warnings": messages, "engine": used})
    return frame


def extra_columns(frame):
    """Names of the frame's extra columns: those after `kind`."""
    columns = list(frame.columns)
    start = columns.index("kind") + 1 if "kind" in columns else 3
    return columns[start:]


def trace_records(frame):
    """Rows as `[ts_us, path, offset, [extras as strings]]`, the layout of
    samples/expected/*.json: in version 2 the kind is the first extra
    field; trailing missing extras are left out."""
    extra_names = extra_columns(frame)
    if frame.attrs.get("version", 1) >= 2 and "kind" in frame.columns:
        extra_names = ["kind"] + extra_names
    records = []
    extras_values = [frame[c].tolist() for c in extra_names]
    for i, (ts_us, path, offset) in enumerate(zip(
            frame["ts_us"].tolist(), frame["path"].tolist(),
            frame["offset"].tolist())):
        extras = [values[i] for values in extras_values]
        while extras and not isinstance(extras[-1], str):
            extras.pop()
        records.append([ts_us, path, offset, extras])
    return records


def expected_json(frame):
    """The read trace laid out like samples/expected/NAME.json, the form in
    which every reader of the format (this one, the C one) is compared."""
    return {"version": frame.attrs["version"],
            "page_size": frame.attrs["page_size"],
            "columns": frame.attrs["columns"],
            "records": trace_records(frame),
            "malformed_lines": [line for line, _ in frame.attrs["malformed"]],
            "trailer": frame.attrs["trailer"]}
