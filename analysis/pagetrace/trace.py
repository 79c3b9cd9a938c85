"""Reader of pagetrace traces, format version 1 (docs/trace-format.md).

`read_trace` returns a DataFrame with one row per page: `ts_us`, `path`
(categorical), `offset`, then the trace's extra columns (categorical
strings). What the file said besides its records is in `df.attrs`:
`version`, `page_size`, `header`, `columns`, `trailer`, `malformed` (a list
of `(line, reason)`), `warnings` and `engine`.

Two engines read records:

* "arrow", the fast one: pyarrow's multi-threaded CSV reader splits fields
  on single spaces and dictionary-encodes paths, and the checks of the spec
  run vectorised over whole columns. Rows that fail a check are handed to the
  reference checker below for their verdict and message, so both engines
  report the same reasons.
* "python", the reference: a line-by-line parser that implements every rule
  of the spec directly. The arrow engine gives way to it whenever the file
  is outside what the fast path handles (runs of separators, rows with a
  varying number of fields, carriage returns), so the result never depends
  on which engine ran, only the speed does.
"""
import gzip
import lzma
import os
import re
import warnings
from dataclasses import dataclass, replace

import numpy as np
import pandas as pd

from .escape import EscapeError, unescape_bytes

KNOWN_VERSIONS = (1,)
DEFAULT_PAGE_SIZE = 4096
BASE_COLUMNS = ("timestamp_us", "path", "offset")
# Names of the first three columns in the DataFrame.
FRAME_BASE_COLUMNS = ("ts_us", "path", "offset")
INT64_MAX = 2**63 - 1
# Decimal strings this long or shorter always fit in an int64.
SAFE_DIGITS = 18
# How many malformed lines are reported one by one as warnings.
WARN_LINES = 20
# When the arrow engine cannot read a whole file, it is read again in
# pieces of about this size, and only the pieces it cannot read go to the
# (ten times slower) python engine.
CHUNK_BYTES = 16 << 20

# `# key: value`, as the C reader (replay/tracefile.c) reads it: blanks
# after `#`, a key of [a-z0-9_-], a colon, blanks; trailing blanks dropped.
_HEADER_LINE = re.compile(r"#[ \t]*([a-z0-9_-]+):[ \t]*(.*?)[ \t]*")
TRAILER_KEYS = ("pages", "bytes", "files", "duration_us", "lost")
UINT64_MAX = 2**64 - 1
# page-size must be a power of two in this range; anything else would make
# every record malformed, so the file is refused instead.
PAGE_SIZE_RANGE = (512, 1 << 30)
_FIELD_SEPARATORS = re.compile(rb"[ \t]+")
_DIGITS = re.compile(rb"[0-9]+")


class TraceError(ValueError):
    """A trace that cannot be read at all."""


class UnsupportedVersionError(TraceError):
    """The header names a `pagetrace-format` version this reader lacks."""

    def __init__(self, source, version):
        self.source = source
        self.version = version
        known = ", ".join(str(v) for v in KNOWN_VERSIONS)
        super().__init__(f"{source}: unsupported pagetrace-format version "
                         f"{version!s}; this reader knows version {known}")


class MalformedTraceError(TraceError):
    """A malformed record, raised in strict mode."""

    def __init__(self, source, line, reason):
        self.source, self.line, self.reason = source, line, reason
        super().__init__(f"{source}:{line}: {reason}")


class TraceWarning(UserWarning):
    """Malformed lines skipped, or events lost by the tracer."""


class _Malformed(Exception):
    """One record broke a rule; the message is the reason."""


@dataclass
class _Layout:
    """Where the records are, and what the comment lines said."""
    header: dict
    trailer: dict         # the last `# end:` line, if after the records
    head_trailer: dict    # the last one before the first record
    version: int
    page_size: int
    columns: list         # as declared
    extra_names: list
    body_start: int       # byte offset of the first line after the header
    body_line: int        # its 1-based line number
    body_end: int         # byte offset where the trailing comments start


def _parse_trailer(text):
    """`# end: pages=1 bytes=4096 ...` -> {'pages': 1, 'bytes': 4096, ...}

    Always the five keys of the spec; a key that is missing, or whose value
    is not an unsigned 64-bit number, is 0; other keys are ignored (as the C
    reader does)."""
    trailer = dict.fromkeys(TRAILER_KEYS, 0)
    for item in re.split(r"[ \t]+", text):
        key, sep, value = item.partition("=")
        if sep and key in trailer and re.fullmatch(r"[0-9]+", value) \
                and int(value) <= UINT64_MAX:
            trailer[key] = int(value)
    return trailer


def _comment_text(raw):
    return raw.decode("utf-8", "surrogateescape").rstrip("\r")


def _scan_layout(data, source):
    """Read the header block at the top and the comment block at the end."""
    header = {}
    trailer = tail_trailer = None
    pos, line_no = 0, 1
    size = len(data)
    # Header: the leading run of comment and empty lines.
    while pos < size:
        end = data.find(b"\n", pos)
        end = size if end == -1 else end
        raw = data[pos:end]
        if raw.startswith(b"#"):
            text = _comment_text(raw)
            match = _HEADER_LINE.fullmatch(text)
            if match and match.group(1) == "end":
                trailer = _parse_trailer(match.group(2))
            elif match:
                header[match.group(1)] = match.group(2)
        elif raw.strip(b" \t"):
            break
        pos, line_no = end + 1, line_no + 1
    body_start, body_line = min(pos, size), line_no
    # Trailing comments: walk back over comment and empty lines.
    body_end = size
    while body_end > body_start:
        line_end = body_end - 1 if data[body_end - 1:body_end] == b"\n" \
            else body_end
        start = data.rfind(b"\n", body_start, line_end) + 1
        start = max(start, body_start)
        raw = data[start:line_end]
        if raw.startswith(b"#"):
            match = _HEADER_LINE.fullmatch(_comment_text(raw))
            if match and match.group(1) == "end" and tail_trailer is None:
                # Walking backwards: the first one met is the file's last.
                tail_trailer = _parse_trailer(match.group(2))
        elif raw.strip(b" \t"):
            break
        body_end = start
    if "command" in header:
        # The command is escaped like a path (it can hold any byte).
        try:
            header["command"] = unescape_bytes(header["command"].encode(
                "utf-8", "surrogateescape")).decode("utf-8", "surrogateescape")
        except EscapeError:
            pass  # informational only: keep it as written
    version_text = header.get("pagetrace-format", "1")
    version = int(version_text) if version_text.isascii() and \
        version_text.isdigit() else version_text
    if version not in KNOWN_VERSIONS:
        raise UnsupportedVersionError(source, version)
    page_size_text = header.get("page-size", str(DEFAULT_PAGE_SIZE))
    page_size = int(page_size_text) if page_size_text.isascii() and \
        page_size_text.isdigit() else 0
    if not (PAGE_SIZE_RANGE[0] <= page_size <= PAGE_SIZE_RANGE[1]
            and page_size & (page_size - 1) == 0):
        raise TraceError(f"{source}: bad page-size {page_size_text!r}")
    # The first three names are always timestamp_us path offset; the file's
    # own spelling of them is not checked, only the extra names are used.
    columns = re.split(r"[ \t]+", header["columns"]) if \
        header.get("columns") else list(BASE_COLUMNS)
    return _Layout(header=header, trailer=tail_trailer,
                   head_trailer=trailer, version=version,
                   page_size=page_size, columns=columns,
                   extra_names=_frame_names(columns[3:]),
                   body_start=body_start, body_line=body_line,
                   body_end=body_end)


def _frame_names(declared):
    """DataFrame names of the extra columns: as declared, except that a
    name already taken (a repeat, or ts_us/path/offset) becomes fieldN."""
    names = []
    for index, name in enumerate(declared):
        taken = name in names or name in FRAME_BASE_COLUMNS
        names.append(f"field{index + 4}" if taken else name)
    return names


def _parse_unsigned(field, what):
    if not _DIGITS.fullmatch(field):
        raise _Malformed(f"{what} is not an unsigned integer: "
                         f"{field.decode('utf-8', 'backslashreplace')!r}")
    value = int(field)
    if value > INT64_MAX:
        raise _Malformed(f"{what} {value} is out of range")
    return value


def _unescape_field(field, what):
    try:
        return unescape_bytes(field).decode("utf-8", "surrogateescape")
    except EscapeError as err:
        raise _Malformed(f"bad escape in {what}: {err}") from None


def _check_fields(fields, page_size, extra_names):
    """The reference check of one record's fields (a list of bytes).

    Returns (ts_us, path, offset, extras) or raises _Malformed.
    """
    if len(fields) < 3:
        raise _Malformed(f"expected at least 3 fields, found {len(fields)}")
    ts_us = _parse_unsigned(fields[0], "timestamp")
    offset = _parse_unsigned(fields[2], "offset")
    if offset % page_size:
        raise _Malformed(f"offset {offset} is not a multiple of page-size "
                         f"{page_size}")
    path = _unescape_field(fields[1], "path")
    extras = [_unescape_field(f, _extra_name(extra_names, i))
              for i, f in enumerate(fields[3:])]
    return ts_us, path, offset, extras


def _extra_name(extra_names, index):
    """Name of extra column `index` (0-based after `offset`)."""
    if index < len(extra_names):
        return extra_names[index]
    return f"field{index + 4}"


def _categorical(values):
    """Categorical with categories in order of first appearance."""
    return pd.Categorical(values, categories=pd.unique(
        pd.Series([v for v in values if v is not None], dtype=object)))


def _frame(ts_us, path, offset, extras, extra_names):
    columns = {"ts_us": np.asarray(ts_us, dtype=np.int64), "path": path,
               "offset": np.asarray(offset, dtype=np.int64)}
    for index, values in enumerate(extras):
        columns[_extra_name(extra_names, index)] = values
    # copy=False: no consolidation copy of the two int64 columns.
    return pd.DataFrame(columns, copy=False)


def _read_python(data, layout):
    """Reference engine: one line at a time."""
    records_ts, records_path, records_offset, records_extra = [], [], [], []
    malformed = []
    n_extra = 0
    lines = data[layout.body_start:layout.body_end].split(b"\n")
    for index, raw in enumerate(lines):
        if raw.startswith(b"#"):
            continue
        fields = _FIELD_SEPARATORS.split(raw.strip(b" \t"))
        if fields == [b""]:
            continue  # an empty (or blank) line
        try:
            ts_us, path, offset, extras = _check_fields(
                fields, layout.page_size, layout.extra_names)
        except _Malformed as err:
            malformed.append((layout.body_line + index, str(err)))
            continue
        records_ts.append(ts_us)
        records_path.append(path)
        records_offset.append(offset)
        records_extra.append(extras)
        n_extra = max(n_extra, len(extras))
    n_extra = max(n_extra, len(layout.extra_names))
    extras = [_categorical([e[i] if i < len(e) else None
                            for e in records_extra]) for i in range(n_extra)]
    frame = _frame(records_ts, _categorical(records_path), records_offset,
                   extras, layout.extra_names)
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
    """Fast engine; raises _NotForArrow when the python engine must run."""
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


def _read_arrow_segments(data, layout, careful):
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.csv as pacsv

    segments, line_numbers = _body_segments(data, layout, careful)
    has_tabs = any(data.find(b"\t", a, b) != -1 for a, b in segments)
    if len(segments) == 1 and not has_tabs:
        body = pa.py_buffer(data).slice(segments[0][0],
                                        segments[0][1] - segments[0][0])
    else:
        joined = b"".join(data[a:b] for a, b in segments)
        body = pa.py_buffer(joined.replace(b"\t", b" ") if has_tabs
                            else joined)
    names = list(FRAME_BASE_COLUMNS) + list(layout.extra_names)
    dictionary = pa.dictionary(pa.int32(), pa.binary())
    column_types = {"ts_us": pa.binary(), "offset": pa.binary(),
                    "path": dictionary}
    column_types.update({name: dictionary for name in layout.extra_names})
    try:
        table = pacsv.read_csv(
            pa.BufferReader(body),
            read_options=pacsv.ReadOptions(column_names=names,
                                           block_size=16 << 20),
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

    # Vectorised checks; rows failing any of them are suspects.
    suspect = np.zeros(n_rows, dtype=bool)
    numbers = {}
    for name in ("ts_us", "offset"):
        text = table.column(name)
        lengths = pc.binary_length(text).to_numpy(zero_copy_only=False)
        if (lengths == 0).any():
            # Runs of separators, or empty lines (arrow reads one as a row
            # of empty fields): worth a retry with empty lines cut out.
            raise _NotForArrow("empty fields", maybe_empty_lines=True)
        # Unchecked cast: a field with bytes that are not UTF-8 is simply
        # not decimal.
        as_text = pc.cast(text, options=pc.CastOptions(
            target_type=pa.string(), allow_invalid_utf8=True))
        decimal = pc.ascii_is_decimal(as_text)
        plain = decimal.to_numpy(zero_copy_only=False) & (lengths <= SAFE_DIGITS)
        if plain.all():
            numbers[name] = pc.cast(as_text, pa.int64()
                                    ).to_numpy(zero_copy_only=False)
            continue
        suspect |= ~plain
        safe_text = pc.if_else(pa.array(plain), as_text, "0")
        numbers[name] = pc.cast(safe_text, pa.int64()
                                ).to_numpy(zero_copy_only=False)
    if layout.page_size & (layout.page_size - 1) == 0:
        # A power of two: a mask is much cheaper than a modulo.
        suspect |= (numbers["offset"] & (layout.page_size - 1)) != 0
    else:
        suspect |= (numbers["offset"] % layout.page_size) != 0
    coded = {}
    for name in ["path"] + list(layout.extra_names):
        codes, raw_values = _dictionary_column(table.column(name))
        values = _unescape_categories(raw_values)
        bad = np.array([v is None for v in values], dtype=bool)
        if bad.any():
            suspect |= bad[codes]
        coded[name] = (codes, raw_values, values)

    # The reference checker decides about suspects and words the reasons.
    malformed = []
    keep = ~suspect
    suspects = np.flatnonzero(suspect)
    if len(suspects):
        # Arrow hands out read-only arrays; suspects may need fixing up.
        numbers = {k: v.copy() for k, v in numbers.items()}
    for row in suspects:
        fields = [table.column("ts_us")[row].as_py(),
                  coded["path"][1][coded["path"][0][row]],
                  table.column("offset")[row].as_py()]
        fields += [coded[name][1][coded[name][0][row]]
                   for name in layout.extra_names]
        try:
            ts_us, _, offset, _ = _check_fields(fields, layout.page_size,
                                                layout.extra_names)
        except _Malformed as err:
            malformed.append((int(line_numbers[row]), str(err)))
            continue
        # Valid after all (a number of 19 digits that fits in an int64).
        numbers["ts_us"][row], numbers["offset"][row] = ts_us, offset
        keep[row] = True
    if keep.all():
        keep = None  # skip three needless copies of every column
    extras = [_recode(*coded[name][::2], keep) for name in layout.extra_names]
    frame = _frame(numbers["ts_us"] if keep is None else numbers["ts_us"][keep],
                   _recode(coded["path"][0], coded["path"][2], keep),
                   numbers["offset"] if keep is None else numbers["offset"][keep],
                   extras, layout.extra_names)
    return frame, malformed


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
    """Read a pagetrace trace (format v1) into a DataFrame.

    path: a trace file; `.xz` and `.gz` files are decompressed.
    strict: raise MalformedTraceError at the first malformed record instead
    of skipping it with a warning.
    engine: "auto" (arrow, giving way to python where needed), "arrow"
    (same), or "python" (the line-by-line reference parser only).
    """
    source = str(path)
    # Compressed traces (samples/ ships one as .xz) are read as they are.
    opener = {".xz": lzma.open, ".gz": gzip.open}.get(
        os.path.splitext(source)[1], open)
    with opener(path, "rb") as trace_file:
        data = trace_file.read()
    return parse_trace_bytes(data, source=source, strict=strict,
                             engine=engine)


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
    if layout.trailer is None:
        # The last `# end:` line of the file wins, as in the C reader.
        layout.trailer = _trailer_from_body(data, layout) or \
            layout.head_trailer
    if strict and malformed:
        raise MalformedTraceError(source, *malformed[0])
    messages = [f"{source}:{line}: {reason}" for line, reason in malformed]
    lost = (layout.trailer or {}).get("lost", 0)
    if isinstance(lost, int) and lost > 0:
        messages.append(f"{source}: the tracer lost {lost} events; "
                        "the trace is incomplete")
    for message in messages[:WARN_LINES]:
        warnings.warn(message, TraceWarning, stacklevel=3)
    if len(messages) > WARN_LINES:
        warnings.warn(f"{source}: {len(messages) - WARN_LINES} more "
                      "warnings (see df.attrs['warnings'])", TraceWarning,
                      stacklevel=3)
    frame.attrs.update({
        "source": source, "version": layout.version,
        "page_size": layout.page_size, "header": dict(layout.header),
        "columns": list(layout.columns),
        "trailer": layout.trailer, "malformed": malformed,
        "warnings": messages, "engine": used})
    return frame


def _trailer_from_body(data, layout):
    """The last `# end:` line among the records (rare: a trace written by
    `trace` has it at the end). Looks only where a `#` starts a line."""
    found = None
    position = data.find(b"#", layout.body_start, layout.body_end)
    while position != -1:
        if position == 0 or data[position - 1:position] == b"\n":
            line_end = data.find(b"\n", position, layout.body_end)
            line_end = layout.body_end if line_end == -1 else line_end
            match = _HEADER_LINE.fullmatch(
                _comment_text(data[position:line_end]))
            if match and match.group(1) == "end":
                found = _parse_trailer(match.group(2))
        position = data.find(b"#", position + 1, layout.body_end)
    return found


def trace_records(frame):
    """Rows as `[ts_us, path, offset, [extras as strings]]`, the layout of
    samples/expected/*.json (trailing missing extras are left out)."""
    extra_columns = list(frame.columns[3:])
    records = []
    extras_values = [frame[c].tolist() for c in extra_columns]
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
