"""The trace format reader of the core: standard library only.

Implements docs/trace-format.md, versions 1 and 2, and its "Readers"
section: which files are refused whole (`TraceError`, one reason), which
records are malformed (flagged with their line and skipped), and the exact
words of every reason. Every Python reader of traces is built on this
module: the tools (pagecache, startup-bench) use `read` / `parse_bytes`
directly, and the pandas reader (`pagetrace.analysis.trace_frame`) uses `read_header`,
`check_record` and `find_trailer`, so that the readers cannot drift apart.
The C reader (lib/tracefile.c) implements the same rules; both are run
on samples/conformance/ by tests/test_conformance.py.
"""
import gzip
import lzma
import os
import re
from collections import namedtuple
from dataclasses import dataclass, field

from pagetrace.core.escape import EscapeError, escape_bytes, unescape_bytes

KNOWN_VERSIONS = (1, 2)
# Record kinds of version 2, in the order of the spec.
RECORD_KINDS = ("read", "access", "map")
DEFAULT_PAGE_SIZE = 4096
# page-size must be a power of two in this range; anything else would make
# every record malformed, so the file is refused instead.
PAGE_SIZE_MIN, PAGE_SIZE_MAX = 512, 1 << 30
BASE_COLUMNS = ("timestamp_us", "path", "offset")
TRAILER_KEYS = ("pages", "bytes", "files", "duration_us", "lost")
TRAILER_KEYS_V2 = TRAILER_KEYS + ("accessed", "mapped")
UINT64_MAX = 2**64 - 1
# Metadata records (docs/trace-format.md): a page of a block device, whose
# path is its node. trace never records a regular file under /dev/.
METADATA_PREFIX = "/dev/"
# How many malformed lines a reader reports one by one (as warnings); the
# rest are counted.
WARN_LINES = 20
# Longest piece of a bad value quoted in a reason (as the C reader).
QUOTE_MAX = 64

# `# key: value`: blanks after `#`, a key of [a-z0-9_-], a colon, blanks.
_COMMENT = re.compile(rb"#[ \t]*([a-z0-9_-]+):[ \t]*(.*)", re.DOTALL)
_FIELD = re.compile(rb"[^ \t]+")


class TraceError(ValueError):
    """A trace refused as a whole: `str()` is `SOURCE: reason`."""

    def __init__(self, source, reason):
        self.source, self.reason = source, reason
        super().__init__(f"{source}: {reason}")


class UnsupportedVersionError(TraceError):
    """The header names a `pagetrace-format` version this reader lacks.

    `version` is the value as an int when it is a plain number, else the
    text as written.
    """

    def __init__(self, source, raw):
        text = _text(raw)
        self.version = int(text) if text.isascii() and text.isdigit() \
            and len(text) < 19 else text
        known = ", ".join(str(v) for v in KNOWN_VERSIONS)
        super().__init__(source, "unsupported trace format version "
                         f"'{_text(raw[:QUOTE_MAX])}' (this reader knows "
                         f"{known})")


class MalformedTraceError(TraceError):
    """A malformed record, in strict mode: `SOURCE:LINE: reason`."""

    def __init__(self, source, line, reason):
        ValueError.__init__(self, f"{source}:{line}: {reason}")
        self.source, self.line, self.reason = source, line, reason


class TraceWarning(UserWarning):
    """Malformed lines skipped, or events lost by the tracer."""


class MalformedRecord(ValueError):
    """One record broke a rule; the message is the reason."""


Record = namedtuple("Record", "line ts_us path offset kind extras")
Record.__doc__ = """One valid record: `path` and `extras` unescaped (str,
surrogateescape), `kind` "read" for every record of a version 1 trace."""


def _text(raw):
    return raw.decode("utf-8", "surrogateescape")


def _quote(raw):
    """A bad value for a reason: at most QUOTE_MAX bytes, escaped like a
    path so that the message stays on one line."""
    return escape_bytes(raw[:QUOTE_MAX]).decode("utf-8", "surrogateescape")


@dataclass
class TraceHeader:
    """What the header says, and where the records start."""
    source: str
    version: int = 1
    page_size: int = DEFAULT_PAGE_SIZE
    columns: list = field(default_factory=lambda: list(BASE_COLUMNS))
    kinds: frozenset = frozenset({"read"})   # declared in `records` (v2)
    keys: dict = field(default_factory=dict)  # every `# key: value`
    body_start: int = 0   # byte offset of the first line after the header
    body_line: int = 1    # its 1-based line number

    @property
    def first_extra(self):
        """Index of the first field after the base ones (and the kind)."""
        return 4 if self.version >= 2 else 3

    @property
    def extra_names(self):
        """Declared names of the extra columns (after `kind` in v2)."""
        return self.columns[self.first_extra:]

    @property
    def trailer_keys(self):
        return TRAILER_KEYS_V2 if self.version >= 2 else TRAILER_KEYS


def split_comment(raw):
    """(key, value) of a `# key: value` line (bytes), or None.

    The value loses trailing carriage returns, then trailing blanks."""
    match = _COMMENT.fullmatch(raw)
    if not match:
        return None
    return _text(match.group(1)), match.group(2).rstrip(b"\r").rstrip(b" \t")


def is_blank(raw):
    """An empty line: nothing but blanks once a final `\\r` is removed."""
    if raw.endswith(b"\r"):
        raw = raw[:-1]
    return not raw.strip(b" \t")


def check_whole_file(data, source):
    """The refusals that look at the bytes alone."""
    if not data:
        raise TraceError(source, "empty file")
    if b"\0" in data:
        raise TraceError(source, "binary data (NUL byte), not a trace")


def read_header(data, source):
    """Check the whole file and read its header: the comment and empty
    lines before the first record. Raises TraceError if it is refused."""
    check_whole_file(data, source)
    raw_keys = {}
    pos, line_no, size = 0, 1, len(data)
    while pos < size:
        end = data.find(b"\n", pos)
        end = size if end == -1 else end
        raw = data[pos:end]
        if raw.startswith(b"#"):
            pair = split_comment(raw)
            if pair and pair[0] != "end":
                raw_keys[pair[0]] = pair[1]   # the last one wins
        elif not is_blank(raw):
            break
        pos, line_no = end + 1, line_no + 1
    header = TraceHeader(source=source, body_start=min(pos, size),
                         body_line=line_no)
    _check_version(header, raw_keys.get("pagetrace-format"))
    _check_page_size(header, raw_keys.get("page-size"))
    _check_columns(header, raw_keys.get("columns"))
    if header.version >= 2:
        _check_records(header, raw_keys.get("records"))
    header.keys = {key: _text(value) for key, value in raw_keys.items()}
    if "command" in raw_keys:
        # The command is escaped like a path (it can hold any byte); it is
        # informational, so a bad escape leaves it as written.
        try:
            header.keys["command"] = _text(unescape_bytes(raw_keys["command"]))
        except EscapeError:
            pass
    return header


def _decimal(raw):
    """The value of a field of ASCII digits, or None."""
    return int(raw) if raw and raw.isdigit() else None


def _check_version(header, raw):
    if raw is None:
        return
    version = _decimal(raw)
    if version not in KNOWN_VERSIONS:
        raise UnsupportedVersionError(header.source, raw)
    header.version = version


def _check_page_size(header, raw):
    if raw is None:
        return
    size = _decimal(raw)
    if size is None or not PAGE_SIZE_MIN <= size <= PAGE_SIZE_MAX \
            or size & (size - 1):
        raise TraceError(header.source,
                         f"bad page-size '{_text(raw[:QUOTE_MAX])}'")
    header.page_size = size


def _check_columns(header, raw):
    names = _FIELD.findall(raw) if raw else []
    if not names:
        names = [n.encode() for n in BASE_COLUMNS]
        if header.version >= 2:
            names.append(b"kind")
    header.columns = [_text(n) for n in names]
    if header.version < 2:
        return
    if len(names) < 4:
        raise TraceError(header.source, "bad header: columns: version 2 "
                         "needs 'kind' as the fourth name")
    if names[3] != b"kind":
        raise TraceError(header.source, "bad header: columns: version 2 "
                         "needs 'kind' as the fourth name, not "
                         f"'{_quote(names[3])}'")


def _check_records(header, raw):
    names = _FIELD.findall(raw) if raw else []
    if not names:
        raise TraceError(header.source, "bad header: no records key "
                         "(version 2 needs it)")
    for name in names:
        if _text(name) not in RECORD_KINDS:
            raise TraceError(header.source, "bad header: records: unknown "
                             f"record kind '{_quote(name)}'")
    header.kinds = frozenset(_text(n) for n in names)


def parse_trailer(value, keys=TRAILER_KEYS):
    """`pages=1 bytes=4096 ...` (bytes) -> dict with every one of `keys`:
    a key that is missing, or whose value is not an unsigned 64-bit
    number, is 0; other keys are ignored."""
    trailer = dict.fromkeys(keys, 0)
    for item in _FIELD.findall(value):
        key, sep, number = item.partition(b"=")
        key = _text(key)
        if sep and key in trailer:
            parsed = _decimal(number)
            if parsed is not None and parsed <= UINT64_MAX:
                trailer[key] = parsed
    return trailer


def find_trailer(data, header):
    """The last `# end:` line of the file, wherever it is; None without
    one. Looks only where a `#` starts a line."""
    found = None
    start = 0 if data.startswith(b"#") else _next_comment(data, 0)
    while start != -1:
        end = data.find(b"\n", start)
        end = len(data) if end == -1 else end
        pair = split_comment(data[start:end])
        if pair and pair[0] == "end":
            found = pair[1]
        start = _next_comment(data, end)
    return None if found is None else parse_trailer(found, header.trailer_keys)


def _next_comment(data, position):
    """Start of the next line that begins with `#` after `position`."""
    newline = data.find(b"\n#", position)
    return -1 if newline == -1 else newline + 1


def _unsigned(raw, what):
    if not raw.isdigit():   # bytes.isdigit(): ASCII digits only
        raise MalformedRecord(f"{what} is not an unsigned integer")
    value = int(raw)
    if value > UINT64_MAX:
        raise MalformedRecord(f"{what} does not fit in 64 bits")
    return value


def check_record(fields, header, crlf=False):
    """The checks of the spec on one record's fields (a list of bytes), in
    its order: the first failing one wins. `crlf`: the line ended in `\\r`
    (removed before splitting). Returns (ts_us, path, offset, kind,
    extras) or raises MalformedRecord."""
    if len(fields) < 3:
        raise MalformedRecord("fewer than three fields")
    if len(fields) == 3 and header.version >= 2:
        raise MalformedRecord("no record kind")
    ts_us = _unsigned(fields[0], "timestamp")
    offset = _unsigned(fields[2], "offset")
    if offset % header.page_size:
        raise MalformedRecord(f"offset {offset} is not a multiple of "
                              f"page-size {header.page_size}")
    try:
        path = unescape_bytes(fields[1])
    except EscapeError:
        raise MalformedRecord("bad escape in path") from None
    try:
        extras = [unescape_bytes(f) for f in fields[3:]]
    except EscapeError:
        raise MalformedRecord("bad escape in an extra column") from None
    kind = "read"
    if header.version >= 2:
        kind = check_kind(extras.pop(0), header)
    if crlf:
        raise MalformedRecord("carriage return at end of line (CRLF line "
                              "endings?)")
    return ts_us, _text(path), offset, kind, [_text(e) for e in extras]


def check_kind(raw, header):
    """The kind of a version 2 record (unescaped bytes) as a str."""
    kind = _text(raw)
    if kind not in RECORD_KINDS:
        raise MalformedRecord(f"unknown record kind '{_quote(raw)}'")
    if kind not in header.kinds:
        raise MalformedRecord(f"record kind '{_quote(raw)}' not declared in "
                              "the records header")
    return kind


def record_lines(data, start, line_no, end=None):
    """(line number, fields, crlf) of every record line in data[start:end]:
    comment and empty lines are skipped; a final `\\r` is removed."""
    end = len(data) if end is None else end
    pos = start
    while pos < end:
        stop = data.find(b"\n", pos, end)
        stop = end if stop == -1 else stop
        raw = data[pos:stop]
        if not raw.startswith(b"#"):
            crlf = raw.endswith(b"\r")
            fields = _FIELD.findall(raw[:-1] if crlf else raw)
            if fields:
                yield line_no, fields, crlf
        pos, line_no = stop + 1, line_no + 1


@dataclass
class Trace:
    """A trace read by the core: its header, valid records, malformed
    lines `(line, reason)` and trailer (None without one)."""
    header: TraceHeader
    records: list
    malformed: list
    trailer: dict

    @property
    def source(self):
        return self.header.source

    def warnings(self):
        """The messages a tool prints (after its own `tool: ` prefix)."""
        messages = [f"{self.source}:{line}: {reason}"
                    for line, reason in self.malformed]
        lost = (self.trailer or {}).get("lost", 0)
        if lost:
            messages.append(f"{self.source}: the tracer lost {lost} events; "
                            "the trace is incomplete")
        return messages

    def expected_json(self):
        """Laid out like samples/expected/NAME.json."""
        # In version 2 the kind is the first of the extra fields.
        kind_shown = self.header.version >= 2
        records = [[r.ts_us, r.path, r.offset,
                    ([r.kind] if kind_shown else []) + r.extras]
                   for r in self.records]
        return {"version": self.header.version,
                "page_size": self.header.page_size,
                "columns": list(self.header.columns), "records": records,
                "malformed_lines": [line for line, _ in self.malformed],
                "trailer": self.trailer}


def parse_bytes(data, source="<bytes>", strict=False):
    """Read a whole trace from bytes. Raises TraceError if it is refused,
    MalformedTraceError at the first malformed record if `strict`."""
    header = read_header(data, source)
    records, malformed = [], []
    for line_no, fields, crlf in record_lines(data, header.body_start,
                                               header.body_line):
        try:
            records.append(Record(line_no, *check_record(fields, header,
                                                         crlf)))
        except MalformedRecord as err:
            if strict:
                raise MalformedTraceError(source, line_no, str(err)) from None
            malformed.append((line_no, str(err)))
    return Trace(header, records, malformed, find_trailer(data, header))


def load(path):
    """The bytes of a trace file; `.xz` and `.gz` are decompressed. Raises
    TraceError (with the system's reason) when it cannot be read."""
    source = os.fsdecode(path)
    opener = {".xz": lzma.open, ".gz": gzip.open}.get(
        os.path.splitext(source)[1], open)
    try:
        with opener(path, "rb") as trace_file:
            return trace_file.read()
    except OSError as err:
        raise TraceError(source, err.strerror or str(err)) from None
    except (lzma.LZMAError, EOFError) as err:
        raise TraceError(source, f"cannot decompress: {err}") from None


def read(path, strict=False):
    """Read a trace file with the core reader (see parse_bytes)."""
    return parse_bytes(load(path), os.fsdecode(path), strict=strict)


def is_metadata(path):
    """Is a record with this (unescaped) path a metadata record: a page of
    the block device `path`, at a byte offset on the device?"""
    return path.startswith(METADATA_PREFIX)


def pages_by_file(trace, kinds=("read",)):
    """({path: set of offsets} in order of first record, [special paths])
    over the records of `kinds`: the tools that evict, warm or replay use
    only `read` records. Special paths (`//deleted/...`) name no usable
    file and are listed apart, in order; so are the device nodes of
    metadata records, which are no file's pages."""
    pages, special = {}, {}
    for record in trace.records:
        if record.kind not in kinds:
            continue
        if record.path.startswith("//") or is_metadata(record.path):
            special.setdefault(record.path, None)
            continue
        pages.setdefault(record.path, set()).add(record.offset)
    return pages, list(special)
