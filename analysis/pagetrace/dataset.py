"""Traces as a Parquet dataset, converted in bounded memory (issue 12).

`convert` turns text traces (any size, `.xz`/`.gz` too) into one Parquet
dataset, a directory with one hive-style partition per run:

    DIR/run=RUN/part-0.parquet

so that a directory of runs is one table for DuckDB (`read_parquet(
'DIR/*/*.parquet', hive_partitioning = true)`) or Spark
(`spark.read.parquet('DIR')`). The schema, documented in docs/scale.md:

    line          uint64   1-based line of the record in its trace
    timestamp_us  uint64
    path          binary   the file name's bytes, unescaped
    offset        uint64
    kind          string   read / access / map (`read` in a version 1 trace)
    page_size     uint32   the trace's page-size, on every row
    <extras>      binary   the trace's extra columns (trace -x), unescaped
    run           string   from the directory name (partition key)

Records are checked exactly as the reader contract says
(docs/trace-format.md, "Readers"), in three tiers: the typed path takes a
block whose every line arrow's CSV parser reads as the declared columns
with integer times and offsets (names, kinds and extras as dictionaries,
so each distinct value is checked once); a block it cannot take goes to
the fast path (arrow, every field as bytes, vectorised checks); and every
line either of them does not accept goes, one at a time, to the reference
line checker of the core reader, which gives the verdict and the reason.
Memory holds a few blocks (PARSE_THREADS being parsed, one being written,
BLOCK_BYTES of text each), whatever the size of the trace.

The same pass computes what `pagetrace summary` says of the run
(SummaryPass) and writes it beside the part file as `_summary.json`, tied
to the file's size and SHA-256; `summary` uses it only for that file and
otherwise asks DuckDB (docs/scale.md).
"""
import collections
import concurrent.futures
import contextlib
import gzip
import lzma
import os
import shutil
import warnings

from . import tracefile
from .escape import EscapeError, unescape_bytes

# Text read per step. Peak memory is a small multiple of it (the block, its
# arrow columns, the Parquet writer's page buffers).
BLOCK_BYTES = 8 << 20
PART_NAME = "part-0.parquet"
RECORD_KINDS = tracefile.RECORD_KINDS
# Decimal strings of at most 19 digits always fit in 64 bits; longer ones go
# to the reference checker, which knows the exact limit.
_SAFE_UNSIGNED = r"^[0-9]{1,19}$"
WARN_LINES = tracefile.WARN_LINES


class DatasetError(ValueError):
    """A trace or a dataset that cannot be used at all; the message names
    the file."""


def _numpy():
    import numpy
    return numpy


def _pa():
    import pyarrow
    import pyarrow.compute
    import pyarrow.csv
    import pyarrow.parquet
    return pyarrow


# --- the core reader's rules ------------------------------------------------

def _extra_names(header):
    """Parquet names of the extra columns: as declared, except that a name
    already taken becomes fieldN (N its 1-based field number)."""
    taken = {"line", "timestamp_us", "path", "offset", "kind", "page_size",
             "run"}
    names = []
    for index, name in enumerate(header.extra_names):
        bad = name in taken or name in names or not name
        names.append(f"field{index + header.first_extra + 1}" if bad
                     else name)
    return names


def reference_rows(block, first_line, header, flag, trailer):
    """The core reader's verdict on every line of a block: yields (line,
    (timestamp_us, path bytes, offset, kind, [extra bytes])) for each valid
    record, calls flag(line, reason) for each malformed one and
    trailer(values) for each `# end:` line."""
    if b"\n#" in block or block.startswith(b"#"):
        _trailers(block, header, trailer)
    for line_no, fields, crlf in tracefile.record_lines(block, 0,
                                                        first_line):
        try:
            ts_us, path, offset, kind, extras = tracefile.check_record(
                fields, header, crlf)
        except tracefile.MalformedRecord as err:
            flag(line_no, str(err))
            continue
        yield line_no, (ts_us, path.encode("utf-8", "surrogateescape"),
                        offset, kind,
                        [e.encode("utf-8", "surrogateescape")
                         for e in extras])


def _trailers(block, header, trailer):
    """Call trailer(values) for each `# end:` line of the block, in order."""
    start = 0 if block.startswith(b"#") else block.find(b"\n#") + 1
    while start > 0 or block.startswith(b"#") and start == 0:
        end = block.find(b"\n", start)
        end = len(block) if end == -1 else end
        pair = tracefile.split_comment(block[start:end])
        if pair and pair[0] == "end":
            trailer(tracefile.parse_trailer(pair[1], header.trailer_keys))
        start = block.find(b"\n#", end) + 1
        if start == 0:
            return


# --- blocks of text --------------------------------------------------------

def _open(path):
    opener = {".xz": lzma.open, ".gz": gzip.open}.get(
        os.path.splitext(str(path))[1], open)
    return opener(path, "rb")


def _blocks(stream, size=BLOCK_BYTES):
    """Yield blocks (bytearrays, each its own) of whole lines, read in
    place after the partial line the block before left (line numbers are
    counted where the block is checked: the typed path's rows are its
    lines)."""
    carry = b""
    while True:
        block = bytearray(len(carry) + size)
        block[:len(carry)] = carry
        read = stream.readinto(memoryview(block)[len(carry):])
        if not read:
            break
        end = len(carry) + read
        cut = block.rfind(b"\n", 0, end) + 1
        if cut == 0:
            carry = bytes(block[:end])
            continue
        carry = bytes(block[cut:end])
        del block[cut:]
        yield block
    if carry:
        yield carry


def _may_hold_hex(block):
    """True when a field of the block may be written in hexadecimal
    (`0x10`), which arrow's integer parser takes and the format does not.
    Two quick byte searches rule it out for most blocks; a field starts a
    line or follows a space."""
    if b"x" not in block and b"X" not in block:
        return False
    return block.startswith((b"0x", b"0X")) or any(
        marker in block for marker in (b" 0x", b" 0X", b"\n0x", b"\n0X"))


def _needs_reference(block):
    """True when the block has a byte the fast path leaves to the reference
    checker: tabs (a second separator) and carriage returns. Everything else
    that is not a plain record (comments, blank lines, runs of spaces,
    leading or trailing blanks) shows up in the parsed columns as a wrong
    number of fields, an empty field or a timestamp that is no number, and
    those lines go to the reference checker one by one."""
    return b"\t" in block or b"\r" in block


class _Converter:
    """One trace into one Parquet file."""

    def __init__(self, header, out_path, run, summarise=True):
        pa = _pa()
        self.pa = pa
        self.header = header
        self.run = run
        self.n_fields = len(header.columns)
        self.extra_names = _extra_names(header)
        fields = [("line", pa.uint64()), ("timestamp_us", pa.uint64()),
                  ("path", pa.binary()), ("offset", pa.uint64()),
                  ("kind", pa.string()), ("page_size", pa.uint32())]
        fields += [(name, pa.binary()) for name in self.extra_names]
        # The columns as the checks build them (plain), and as they are
        # written: names, kinds and extras dictionary-encoded, as arrow's
        # CSV reader gives them on the typed path, and the columns every
        # record has required (no null flags to write). The file keeps no
        # arrow schema, so every reader sees the plain types (binary,
        # string).
        self.schema = pa.schema(fields)
        self.written_schema = pa.schema([
            pa.field(f.name, pa.dictionary(pa.int32(), f.type)
                     if f.name in self._dictionary_columns else f.type,
                     nullable=f.name in self.extra_names)
            for f in self.schema])
        self.writer = pa.parquet.ParquetWriter(
            out_path, self.written_schema, compression="snappy",
            store_schema=False, write_statistics=False,
            use_dictionary=list(self._dictionary_columns) + ["page_size"],
            # Line numbers, times and offsets mostly grow by small steps:
            # deltas make the file 7 times smaller and quicker to write.
            column_encoding={name: "DELTA_BINARY_PACKED" for name in
                             ("line", "timestamp_us", "offset")})
        self.writer.add_key_value_metadata({
            b"pagetrace-format": str(header.version).encode(),
            b"page-size": str(header.page_size).encode(),
            b"source": os.fsencode(header.source)})
        self.summary = SummaryPass(header.page_size) if summarise else None
        self._pool = concurrent.futures.ThreadPoolExecutor(1)
        self._pending = None
        self.records = 0
        self.malformed = []      # (line, reason), the first WARN_LINES
        self.n_malformed = 0
        self.malformed_lines = []  # every one, for summary --json
        self.surplus = 0         # records with more fields than declared
        self.trailer = None
        self.next_line = header.body_line

    @property
    def _dictionary_columns(self):
        return ["path", "kind"] + self.extra_names

    # The typed path ---------------------------------------------------------
    def _typed(self, block, first_line):
        """(table, line numbers of the rows it leaves out) of a block whose
        every line arrow's CSV reader parses as the declared columns with
        unsigned integer times and offsets, or None. Names, kinds and extras
        come dictionary-encoded, so that each distinct value is checked and
        unescaped once; rows with a value the checks refuse go to the
        reference checker."""
        pa, np = self.pa, _numpy()
        n = self.n_fields
        v2 = self.header.version >= 2
        if n < 3 or (v2 and n < 4) or _may_hold_hex(block):
            return None
        names = [f"f{i}" for i in range(n)]
        types = {c: pa.dictionary(pa.int32(), pa.binary()) for c in names}
        types.update(f0=pa.uint64(), f2=pa.uint64())
        try:
            table = pa.csv.read_csv(
                pa.py_buffer(block),
                # Not threaded: see _fast.
                read_options=pa.csv.ReadOptions(column_names=names,
                                                block_size=len(block) + 1,
                                                use_threads=False),
                parse_options=pa.csv.ParseOptions(
                    delimiter=" ", quote_char=False, escape_char=False,
                    ignore_empty_lines=False),
                convert_options=pa.csv.ConvertOptions(
                    column_types=types, null_values=[],
                    strings_can_be_null=False, true_values=[],
                    false_values=[]))
        except (pa.ArrowInvalid, pa.ArrowException):
            return None
        rows = table.num_rows
        table = table.combine_chunks()
        offset = table["f2"].chunk(0) if rows else pa.array([], pa.uint64())
        bad = np.zeros(rows, dtype=bool)
        if rows:
            bad |= (offset.to_numpy() & np.uint64(self.header.page_size - 1)
                    ) != 0
        checked = [self._typed_values(table["f1"], unescape=True)]
        if v2:
            checked.append(self._typed_values(table["f3"], kinds=True))
        checked += [self._typed_values(table[f"f{i}"], unescape=True)
                    for i in range(4 if v2 else 3, n)]
        if None in checked:
            return None
        for _, bad_values in checked:
            bad |= bad_values
        path = checked[0][0]
        if v2:
            kind = checked[1][0]
        else:
            kind = pa.DictionaryArray.from_arrays(
                pa.array(np.zeros(rows, dtype=np.int32)),
                pa.array(["read"], pa.string()))
        extras = [column for column, _ in checked[2 if v2 else 1:]]
        line = np.arange(first_line, first_line + rows, dtype=np.uint64)
        result = pa.table(
            [pa.array(line), table["f0"], path, offset, kind,
             pa.array(np.full(rows, self.header.page_size, dtype=np.uint32))]
            + extras, schema=self.written_schema)
        if not bad.any():
            return result, [], rows
        return result.filter(pa.array(~bad)), line[bad].tolist(), rows

    def _typed_values(self, column, unescape=False, kinds=False):
        """(the dictionary column with its values unescaped, or as kinds;
        which rows hold a value the checks refuse: empty, a bad escape, a
        kind not declared), or None when a value holds a NUL byte or a tab
        (the block is then for the other paths)."""
        pa, np = self.pa, _numpy()
        array = column.chunk(0) if column.num_chunks else \
            pa.array([], column.type)
        values = array.dictionary.to_pylist()
        fixed, refused = [], []
        for index, value in enumerate(values):
            if b"\0" in value or b"\t" in value:
                return None
            try:
                value = unescape_bytes(value)
            except EscapeError:
                refused.append(index)
            if not value or (kinds and value.decode("latin-1") not in
                             self.header.kinds):
                refused.append(index)
            fixed.append(value)
        if kinds:
            fixed = pa.array([v.decode("latin-1") for v in fixed],
                             pa.string())
        else:
            fixed = pa.array(fixed, pa.binary())
        new = pa.DictionaryArray.from_arrays(array.indices, fixed)
        if not refused:
            return new, False
        marks = np.zeros(len(values), dtype=bool)
        marks[refused] = True
        return new, marks[array.indices.to_numpy(zero_copy_only=False)]

    # The fast path --------------------------------------------------------
    def _fast(self, block, first_line):
        """(table of the block's well-formed records, line numbers of the
        other lines), or None when the block does not parse as columns at
        all (then every line goes to the reference checker)."""
        pa, pc = self.pa, self.pa.compute
        n = self.n_fields
        if n < 3 or (self.header.version >= 2 and n < 4):
            return None
        names = [f"f{i}" for i in range(n)]
        try:
            table = pa.csv.read_csv(
                pa.py_buffer(block),
                # use_threads=False: the threaded reader, when it fails
                # (a block that is not columns), leaves a read-ahead task
                # running, and the interpreter then dies of SIGABRT at exit
                # (apache/arrow#38676); the core reader avoids it the same
                # way (trace.py).
                read_options=pa.csv.ReadOptions(column_names=names,
                                                block_size=4 << 20,
                                                use_threads=False),
                parse_options=pa.csv.ParseOptions(
                    delimiter=" ", quote_char=False, escape_char=False,
                    ignore_empty_lines=False),
                convert_options=pa.csv.ConvertOptions(
                    column_types={c: pa.binary() for c in names},
                    null_values=[], strings_can_be_null=False))
        except (pa.ArrowInvalid, pa.ArrowException):
            return None
        rows = table.num_rows
        v2 = self.header.version >= 2
        bad = []
        ts, bad_ts = self._unsigned(table["f0"])
        offset, bad_offset = self._unsigned(table["f2"])
        bad += [bad_ts, bad_offset]
        bad.append(pc.not_equal(pc.bit_wise_and(offset, pa.scalar(
            self.header.page_size - 1, pa.uint64())), 0))
        path, bad_path = self._unescaped(table["f1"])
        bad += [bad_path, pc.equal(pc.binary_length(table["f1"]), 0)]
        if v2:
            kind = table["f3"].cast(pa.string(), safe=False)
            bad.append(pc.invert(pc.is_in(kind, value_set=pa.array(
                list(self.header.kinds), pa.string()))))
        else:
            kind = pa.nulls(rows, pa.string()).fill_null("read")
        extras = []
        for i in range(4 if v2 else 3, n):
            column, bad_extra = self._unescaped(table[f"f{i}"])
            extras.append(column)
            bad += [bad_extra, pc.equal(pc.binary_length(table[f"f{i}"]), 0)]
        bad = [b for b in bad if b is not None]
        any_bad = bad[0]
        for other in bad[1:]:
            any_bad = pc.or_(any_bad, other)
        line = pa.array(_numpy().arange(first_line, first_line + rows,
                                        dtype="uint64"))
        result = pa.table([line, ts, path, offset, kind,
                           pa.array(_numpy().full(rows, self.header.page_size,
                                              dtype="uint32"))] + extras,
                          schema=self.schema)
        if not pc.any(any_bad).as_py():
            return result, [], rows
        bad_lines = pc.filter(line, any_bad).to_pylist()
        return result.filter(pc.invert(any_bad)), bad_lines, rows

    def _unsigned(self, column):
        """The column as uint64 (0 where it is not a plain decimal number),
        and which rows were not (None: all were)."""
        pa, pc = self.pa, self.pa.compute
        try:
            values = column.cast(pa.uint64())
        except pa.ArrowInvalid:
            values = None
        # arrow also parses 0x/0X hexadecimal, which the format does not
        # allow.
        if values is not None and not pc.any(pc.or_(
                pc.starts_with(column, "0x"),
                pc.starts_with(column, "0X"))).as_py():
            return values, None
        bad = pc.invert(pc.match_substring_regex(column, _SAFE_UNSIGNED))
        return pc.if_else(bad, pa.scalar(b"0"), column).cast(
            pa.uint64()), bad

    def _unescaped(self, column):
        """The column with `\\ooo` escapes turned into bytes (each distinct
        escaped value once), and which rows had a bad escape (None: none)."""
        pa, pc = self.pa, self.pa.compute
        if not pc.any(pc.match_substring(column, "\\")).as_py():
            return column, None
        encoded = pc.dictionary_encode(column).combine_chunks()
        values = encoded.dictionary.to_pylist()
        fixed, broken = [], []
        for index, value in enumerate(values):
            try:
                fixed.append(unescape_bytes(value))
            except EscapeError:
                fixed.append(value)
                broken.append(index)
        new = pa.DictionaryArray.from_arrays(
            encoded.indices, pa.array(fixed, pa.binary()))
        bad = pc.is_in(encoded.indices, value_set=pa.array(broken,
                                                           pa.int32()))
        return new.cast(pa.binary()), bad

    # The reference path ---------------------------------------------------
    def _reference(self, block, first_line):
        return self._table(list(reference_rows(
            block, first_line, self.header, self._flag, self._set_trailer)))

    def _set_trailer(self, values):
        self.trailer = values

    def _table(self, rows):
        pa = self.pa
        n_extra = len(self.extra_names)
        extras = [[] for _ in range(n_extra)]
        for _, record in rows:
            values = record[4]
            if len(values) > n_extra:
                self.surplus += 1
            for i in range(n_extra):
                extras[i].append(values[i] if i < len(values) else None)
        columns = [
            pa.array([r[0] for r in rows], pa.uint64()),
            pa.array([r[1][0] for r in rows], pa.uint64()),
            pa.array([r[1][1] for r in rows], pa.binary()),
            pa.array([r[1][2] for r in rows], pa.uint64()),
            pa.array([r[1][3] for r in rows], pa.string()),
            pa.array([self.header.page_size] * len(rows), pa.uint32())]
        columns += [pa.array(values, pa.binary()) for values in extras]
        return pa.table(columns, schema=self.schema)

    def _as_written(self, table):
        """The table in the written schema (dictionary-encoded)."""
        if table.schema == self.written_schema:
            return table
        return self.pa.table(
            [column.cast(field.type) for column, field in
             zip(table.columns, self.written_schema)],
            schema=self.written_schema)

    def _flag(self, line_no, reason):
        self.n_malformed += 1
        self.malformed_lines.append(line_no)
        if len(self.malformed) < WARN_LINES:
            self.malformed.append((line_no, reason))

    # One block --------------------------------------------------------------
    def parse(self, block, last):
        """What can be done for a block in any order, in any thread (arrow
        releases the GIL): (block, last, tail, the typed or fast path's
        result or None), the result's line numbers counted from 1 at the
        block's start. Raises TraceError for a NUL byte."""
        typed = block and not last and b"\r" not in block
        if typed:
            # Arrow ends lines at a carriage return too; the typed path
            # checks the NUL bytes and tabs itself (in the few distinct
            # values of the columns that are not numbers).
            result = self._typed(block, 1)
            if result is not None:
                return block, last, b"", result
        block = bytes(block)      # for the core reader's checks
        if b"\0" in block:
            raise tracefile.TraceError(self.header.source,
                                       "binary data (NUL byte), not a trace")
        tail = b""
        if last:
            block, tail = _split_tail(block)
        result = None
        if block and not _needs_reference(block):
            if not typed:
                result = self._typed(block, 1)
            if result is None:
                result = self._fast(block, 1)
        return block, last, tail, result

    def add_parsed(self, block, last, tail, result):
        """The rest, in trace order: line numbers, the reference checker's
        lines, the summary, the write."""
        first_line = self.next_line
        if result is None:
            table = self._reference(block, first_line)
            self.next_line += block.count(b"\n")
        else:
            table, bad_lines, lines = result
            self.next_line += lines
            if first_line != 1:
                pa = self.pa
                table = table.set_column(0, "line", pa.compute.add(
                    table["line"], pa.scalar(first_line - 1, pa.uint64())))
                bad_lines = [line + first_line - 1 for line in bad_lines]
            if bad_lines:
                table = self._merge_reference(table, block, first_line,
                                              bad_lines)
        if table.schema != self.written_schema:
            table = self._as_written(table)
        if table.num_rows:
            if self.summary is not None:
                self.summary.add(table)
            self._write(table)
            self.records += table.num_rows
        if last and tail:
            _trailers(tail, self.header, self._set_trailer)

    def _merge_reference(self, table, block, first_line, bad_lines):
        lines = bytes(block).split(b"\n")
        rows = []
        for line_no in bad_lines:
            rows += reference_rows(lines[line_no - first_line], line_no,
                                   self.header, self._flag,
                                   self._set_trailer)
        if not rows:
            return table
        return self.pa.concat_tables([
            self._as_written(table),
            self._as_written(self._table(rows))]).sort_by("line")

    def _write(self, table):
        """Write in a second thread (arrow releases the GIL), so that the
        next block is parsed while this one is compressed; at most one
        block waits."""
        if self._pending is not None:
            self._pending.result()
        self._pending = self._pool.submit(self.writer.write_table, table)

    def close(self):
        if self._pending is not None:
            self._pending.result()
            self._pending = None
        self._pool.shutdown()
        self.writer.close()


# --- summary, in the conversion's pass ---------------------------------------

# The per-file summary computed while converting is written beside the part
# file, as `_summary.json` (Spark and Hive skip names that start with `_`).
SUMMARY_NAME = "_summary.json"
SUMMARY_VERSION = 1
# Distinct pages are counted in one byte per page of each file's span of
# page numbers (up to the highest page read); past this many bytes the
# conversion gives the summary up and `summary` asks DuckDB, as for a
# dataset written by another tool.
PAGE_MAP_BYTES = 256 << 20
# Page numbers past this give the summary up (the map could not hold them).
MAX_PAGE_NUMBER = 1 << 40
_U64_MAX = (1 << 64) - 1


class SummaryPass:
    """What `summary` computes of a run (dataset.summary: per file the
    pages, distinct pages, first and last time and first line of the read
    records; requests and seeks in trace order), computed from the blocks
    the converter writes, in trace order. `valid` turns False, and the
    memory goes, when the distinct pages outgrow PAGE_MAP_BYTES."""

    def __init__(self, page_size, max_request_bytes=1 << 20):
        np = _numpy()
        from .outofcore import RequestStream
        self.page_size = page_size
        self.max_request_bytes = max_request_bytes
        self.shift = page_size.bit_length() - 1
        self.ids = {}                  # path bytes -> number
        self.paths = []
        self.pages = np.zeros(0, dtype=np.int64)
        self.first_us = np.zeros(0, dtype=np.uint64)
        self.last_us = np.zeros(0, dtype=np.uint64)
        self.first_line = np.zeros(0, dtype=np.uint64)
        self.base = np.zeros(0, dtype=np.int64)    # where a file's map starts
        self.span = np.zeros(0, dtype=np.int64)    # and how many pages it has
        self.map = np.zeros(min(1 << 16, PAGE_MAP_BYTES), dtype=np.uint8)
        self.used = 0
        self.stream = RequestStream(page_size, max_request_bytes)
        self.valid = True

    def add(self, table):
        """One block's records as written (dictionary-encoded path and
        kind), in trace order."""
        if not self.valid:
            return
        pa, np = _pa(), _numpy()
        table = table.select(["line", "timestamp_us", "path", "offset",
                              "kind"])
        if any(c.num_chunks != 1 for c in table.columns):
            table = table.unify_dictionaries().combine_chunks()
        kind = table["kind"].chunk(0)
        if kind.dictionary.to_pylist() != ["read"]:
            reads = [i for i, v in enumerate(kind.dictionary.to_pylist())
                     if v == "read"]
            table = table.filter(pa.compute.is_in(
                kind.indices, value_set=pa.array(reads, pa.int32())))
            if any(c.num_chunks != 1 for c in table.columns):
                table = table.combine_chunks()
        if not table.num_rows:
            return
        path = table["path"].chunk(0)
        index = path.indices.to_numpy(zero_copy_only=False)
        numbers = self._numbers(path.dictionary.to_pylist())
        offset = table["offset"].chunk(0).to_numpy()
        page = offset >> np.uint64(self.shift)
        if page.max() >= MAX_PAGE_NUMBER:
            return self._give_up()
        page = page.astype(np.int64)
        # Per value of the block's dictionary (its paths, a few hundred at
        # most in a block as a rule), then per file: two values may name
        # the same file (`\101` and `A`), hence the ufunc.at.
        k = len(numbers)
        low, high = np.full(k, _U64_MAX, np.uint64), np.zeros(k, np.uint64)
        first, top = np.full(k, _U64_MAX, np.uint64), np.full(k, -1, np.int64)
        ts = table["timestamp_us"].chunk(0).to_numpy()
        np.minimum.at(low, index, ts)
        np.maximum.at(high, index, ts)
        np.minimum.at(first, index, table["line"].chunk(0).to_numpy())
        np.maximum.at(top, index, page)
        seen = top >= 0
        files = numbers[seen]
        np.add.at(self.pages, files, np.bincount(index, minlength=k)[seen])
        np.minimum.at(self.first_us, files, low[seen])
        np.maximum.at(self.last_us, files, high[seen])
        np.minimum.at(self.first_line, files, first[seen])
        top = top[seen]
        wider = top >= self.span[files]
        for file, highest in zip(files[wider], top[wider]):
            if highest >= self.span[file] and not self._grow(
                    int(file), int(highest) + 1):
                return self._give_up()
        codes = np.take(numbers, index)
        where = np.take(self.base[numbers], index)
        where += page
        np.put(self.map, where, 1)
        self.stream.add_codes(codes, offset, int(codes[0]), int(codes[-1]))

    def _numbers(self, values):
        """The number of each path, new paths numbered as they come."""
        np = _numpy()
        numbers = np.empty(len(values), dtype=np.int64)
        for index, value in enumerate(values):
            number = self.ids.get(value)
            if number is None:
                number = self.ids[value] = len(self.paths)
                self.paths.append(value)
            numbers[index] = number
        if len(self.paths) > len(self.pages):
            self._more_files(len(self.paths))
        return numbers

    def _more_files(self, count):
        np = _numpy()
        size = max(count, 2 * len(self.pages), 64)
        extra = size - len(self.pages)
        self.pages = np.concatenate([self.pages, np.zeros(extra, np.int64)])
        self.first_us = np.concatenate([self.first_us, np.full(
            extra, np.iinfo(np.uint64).max, np.uint64)])
        self.last_us = np.concatenate([self.last_us,
                                       np.zeros(extra, np.uint64)])
        self.first_line = np.concatenate([self.first_line, np.full(
            extra, np.iinfo(np.uint64).max, np.uint64)])
        self.base = np.concatenate([self.base, np.zeros(extra, np.int64)])
        self.span = np.concatenate([self.span, np.zeros(extra, np.int64)])

    def _grow(self, file, pages):
        """Room for pages 0 .. pages-1 of a file: a new stretch of the map
        (at least twice the old), its marks copied. False past
        PAGE_MAP_BYTES."""
        np = _numpy()
        old, start = int(self.span[file]), int(self.base[file])
        size = max(pages, 2 * old, 16)
        if self.used + size > len(self.map):
            length = max(self.used + size, 2 * len(self.map))
            if length > PAGE_MAP_BYTES:
                return False
            bigger = np.zeros(length, dtype=np.uint8)
            bigger[:self.used] = self.map[:self.used]
            self.map = bigger
        self.map[self.used:self.used + old] = self.map[start:start + old]
        self.map[start:start + old] = 0
        self.base[file], self.span[file] = self.used, size
        self.used += size
        return True

    def _give_up(self):
        self.valid = False
        self.map = None

    def result(self, part):
        """The summary, for `_summary.json`: the part file's size and
        SHA-256 (it is used only with that file), and per file (path as
        latin-1 text of its bytes, pages, distinct pages, first and last
        time, first line) in order of first read."""
        import hashlib
        np = _numpy()
        n = len(self.paths)
        rows = []
        for file in range(n):
            if not self.pages[file]:
                continue    # named only by records of other kinds
            start, size = int(self.base[file]), int(self.span[file])
            rows.append([self.paths[file].decode("latin-1"),
                         int(self.pages[file]),
                         int(np.count_nonzero(self.map[start:start + size])),
                         int(self.first_us[file]), int(self.last_us[file]),
                         int(self.first_line[file])])
        rows.sort(key=lambda row: (row[3], row[5]))
        with open(part, "rb") as f:
            digest = hashlib.file_digest(f, "sha256").hexdigest()
        return {"summary-version": SUMMARY_VERSION,
                "part": os.path.basename(part),
                "part_bytes": os.path.getsize(part), "part_sha256": digest,
                "page_size": self.page_size, "files": rows,
                "max_request_bytes": self.max_request_bytes,
                "requests": self.stream.requests,
                "seeks": self.stream.seeks}


def write_summary(summary_pass, part):
    """Write the pass's `_summary.json` beside the part file."""
    import json
    with open(os.path.join(os.path.dirname(part), SUMMARY_NAME), "w",
              encoding="ascii") as out:
        json.dump(summary_pass.result(part), out)


def known_summary(part, page_size):
    """The `_summary.json` beside a part file when it was written for
    exactly this file (same name, size, SHA-256 and page size), else
    None: then the summary is computed from the file itself."""
    import hashlib
    import json
    try:
        with open(os.path.join(os.path.dirname(part), SUMMARY_NAME),
                  encoding="ascii") as f:
            known = json.load(f)
        if (known.get("summary-version") != SUMMARY_VERSION
                or known.get("part") != os.path.basename(part)
                or known.get("page_size") != page_size
                or known.get("part_bytes") != os.path.getsize(part)):
            return None
        if not _summary_shape(known):
            return None
        with open(part, "rb") as f:
            digest = hashlib.file_digest(f, "sha256").hexdigest()
    except (OSError, ValueError, AttributeError):
        return None
    return known if digest == known.get("part_sha256") else None


def _summary_shape(known):
    """True when the rows and counts of a `_summary.json` have the types
    `summary` reads."""
    def counts(values):
        return all(type(v) is int and v >= 0 for v in values)
    rows = known.get("files")
    return (isinstance(rows, list)
            and counts([known.get("requests"), known.get("seeks")])
            and all(isinstance(row, list) and len(row) == 6
                    and isinstance(row[0], str) and counts(row[1:])
                    and all(ord(c) < 256 for c in row[0])
                    for row in rows))


def _split_tail(block):
    """(records, trailing comment and empty lines) of the trace's last
    block, so that the trailer does not send the block to the reference
    checker."""
    end = len(block)
    while end > 0:
        line_end = end - 1 if block[end - 1:end] == b"\n" else end
        start = block.rfind(b"\n", 0, line_end) + 1
        raw = block[start:line_end]
        if not raw.startswith(b"#") and not tracefile.is_blank(raw):
            break
        end = start
    return block[:end], block[end:]


def run_name(path):
    """Default run id of a trace: its file name without extensions."""
    return os.path.basename(str(path)).split(".")[0] or "run"


class ConvertResult:
    def __init__(self, source, run, path, records, header, malformed,
                 n_malformed, trailer, surplus, malformed_lines=()):
        self.source, self.run, self.path = source, run, path
        self.records, self.header = records, header
        self.malformed, self.n_malformed = malformed, n_malformed
        self.trailer, self.surplus = trailer, surplus
        self.malformed_lines = list(malformed_lines)

    def messages(self, surplus=True):
        """Warnings in the core reader's form: FILE:LINE: reason; with
        `surplus`, also say that fields beyond the declared columns were
        not kept (which matters only for a dataset that is kept)."""
        out = [f"{self.source}:{line}: {reason}"
               for line, reason in self.malformed]
        if self.n_malformed > len(self.malformed):
            out.append(f"{self.source}: {self.n_malformed - len(self.malformed)}"
                       " more malformed lines")
        lost = (self.trailer or {}).get("lost", 0)
        if lost:
            out.append(f"{self.source}: the tracer lost {lost} events; "
                       "the trace is incomplete")
        if surplus and self.surplus:
            out.append(f"{self.source}: {self.surplus} records have more "
                       "fields than the columns header declares; Parquet "
                       "keeps the declared ones")
        return out


def convert_trace(source, out_dir, run=None, strict=False,
                  block_bytes=BLOCK_BYTES, summarise=True):
    """Convert one text trace into DIR/run=RUN/part-0.parquet.

    Returns a ConvertResult. Raises tracefile.TraceError (naming the file)
    for a trace the reader contract refuses; nothing is left behind then.
    With `strict`, the first malformed record raises MalformedTraceError.
    """
    source = os.fsdecode(source)
    run = run or run_name(source)
    if "/" in run or run in ("", ".", ".."):
        raise DatasetError(f"{source}: bad run id '{run}'")
    final_dir = os.path.join(out_dir, f"run={run}")
    tmp_dir = os.path.join(out_dir, f".run={run}.tmp")
    shutil.rmtree(tmp_dir, ignore_errors=True)
    os.makedirs(tmp_dir)
    converter = None
    try:
        with _open(source) as stream:
            blocks = _blocks(stream, block_bytes)
            head, header = _read_head(blocks, source)
            converter = _Converter(header, os.path.join(tmp_dir, PART_NAME),
                                   run, summarise)
            _trailers(head[:header.body_start], header,
                      converter._set_trailer)
            first = head[header.body_start:]
            _convert_blocks(converter, _with_last(first, blocks), source,
                            strict)
        converter.close()
        if converter.summary is not None and converter.summary.valid:
            write_summary(converter.summary,
                          os.path.join(tmp_dir, PART_NAME))
        shutil.rmtree(final_dir, ignore_errors=True)
        os.rename(tmp_dir, final_dir)
    except (lzma.LZMAError, EOFError) as err:
        _discard(converter, tmp_dir)
        raise tracefile.TraceError(source, f"cannot decompress: {err}") \
            from None
    except OSError as err:
        _discard(converter, tmp_dir)
        raise tracefile.TraceError(source, err.strerror or str(err)) \
            from None
    except BaseException:
        _discard(converter, tmp_dir)
        raise
    return ConvertResult(source, run, os.path.join(final_dir, PART_NAME),
                         converter.records, header, converter.malformed,
                         converter.n_malformed, converter.trailer,
                         converter.surplus,
                         sorted(converter.malformed_lines))


# Blocks parsed at once, each in a thread of its own (the fast path is
# arrow's, which releases the GIL); the checks and writes stay in order.
PARSE_THREADS = 2


def _with_last(first, blocks):
    """(block, last) for `first` and then every block."""
    pending = first
    for block in blocks:
        yield pending, False
        pending = block
    yield pending, True


def _convert_blocks(converter, blocks, source, strict):
    """Parse up to PARSE_THREADS blocks ahead while the converter takes
    them in order."""
    pool = concurrent.futures.ThreadPoolExecutor(PARSE_THREADS)
    ahead = collections.deque()
    try:
        for block in blocks:
            ahead.append(pool.submit(converter.parse, *block))
            if len(ahead) > PARSE_THREADS:
                converter.add_parsed(*ahead.popleft().result())
                _raise_strict(converter, source, strict)
        while ahead:
            converter.add_parsed(*ahead.popleft().result())
            _raise_strict(converter, source, strict)
    finally:
        for future in ahead:
            future.cancel()
        pool.shutdown(wait=True)


def _read_head(blocks, source):
    """(first bytes, header): blocks are joined until the header block is
    complete (a record line follows it, or the file ends), so that a key
    in a later block is not missed."""
    head = bytes(next(blocks, b""))
    while True:
        try:
            header = tracefile.read_header(head, source)
        except tracefile.TraceError:
            header = None
        if header is not None and header.body_start < len(head):
            return head, header
        more = next(blocks, None)
        if more is None:
            # The whole file is header: read it again for its verdict.
            return head, tracefile.read_header(head, source)
        head += bytes(more)


def _discard(converter, tmp_dir):
    if converter is not None:
        try:
            converter.close()
        except Exception:  # noqa: BLE001 (already failing)
            pass
    shutil.rmtree(tmp_dir, ignore_errors=True)


def _raise_strict(converter, source, strict):
    if strict and converter.malformed:
        raise tracefile.MalformedTraceError(source, *converter.malformed[0])


def convert(sources, out_dir, runs=None, strict=False, report=None,
            kept=True, summarise=True):
    """Convert several traces into one dataset; a trace that fails is
    reported through `report(message)` and the others go on. Returns the
    list of ConvertResults of the traces converted."""
    report = report or (lambda message: warnings.warn(message))
    os.makedirs(out_dir, exist_ok=True)
    results, seen = [], set()
    for index, source in enumerate(sources):
        run = runs[index] if runs else run_name(source)
        if run in seen:
            report(f"{source}: run id {run!r} already taken by another "
                   "trace of this conversion; name the runs apart")
            continue
        seen.add(run)
        try:
            result = convert_trace(source, out_dir, run, strict=strict,
                                   summarise=summarise)
        except (tracefile.TraceError, DatasetError) as err:
            report(str(err))
            continue
        for message in result.messages(surplus=kept):
            report(message)
        results.append(result)
    return results


# --- reading a dataset back, out of core -----------------------------------

# DuckDB's own memory cap: it spills sorts, joins and aggregates to
# temp_directory past it. Peak RSS is about this plus the interpreter.
DEFAULT_MEMORY_LIMIT = "512MB"


class Runs:
    """Parquet part files of a set of runs, checked: every input is a text
    trace (converted into `work_dir` first), a part file, or a dataset
    directory (DIR/run=RUN/*.parquet, or a run directory itself). A file
    that cannot be used is reported and left out; `parts` are the others,
    `page_size` theirs. With `summarise`, text traces are converted with
    their summary pass (which only `summary` uses)."""

    def __init__(self, inputs, work_dir, report, strict=False,
                 summarise=False):
        self.report = report
        self.parts = []            # (run, part file, source)
        self.results = []          # ConvertResults of converted text traces
        texts = []
        for source in inputs:
            source = os.fsdecode(source)
            if os.path.isdir(source):
                self._add_directory(source)
            elif source.endswith(".parquet"):
                self._add_part(_run_of_part(source), source, source)
            else:
                texts.append(source)
        if texts:
            taken = {run for run, _, _ in self.parts}
            names = _unique_runs(texts, taken)
            self.results = convert(texts, work_dir, runs=names,
                                   strict=strict, report=report, kept=False,
                                   summarise=summarise)
            for result in self.results:
                self.parts.append((result.run, result.path, result.source))
        self.page_size = self._check_page_sizes()

    def _add_directory(self, directory):
        found = []
        for root, dirs, files in os.walk(directory):
            dirs[:] = sorted(d for d in dirs if not d.startswith("."))
            found += [os.path.join(root, f) for f in sorted(files)
                      if f.endswith(".parquet")]
        if not found:
            self.report(f"{directory}: no Parquet files (give a directory "
                        "written by pagetrace convert)")
        for path in found:
            self._add_part(_run_of_part(path), path, path)

    def _add_part(self, run, path, source):
        pq = _pa().parquet
        try:
            names = pq.ParquetFile(path).schema_arrow.names
        except Exception as err:  # noqa: BLE001 (arrow raises many kinds)
            self.report(f"{path}: not a readable Parquet file (truncated or "
                        f"corrupt): {_first_line(err)}")
            return
        missing = [c for c in ("line", "timestamp_us", "path", "offset",
                               "kind", "page_size") if c not in names]
        if missing:
            self.report(f"{path}: not a pagetrace dataset file (no column "
                        f"{', '.join(missing)})")
            return
        self.parts.append((run, path, source))

    def _check_page_sizes(self):
        """The page size of the first run; runs with another one are
        reported and left out."""
        pq = _pa().parquet
        kept, page_size = [], None
        for run, path, source in self.parts:
            meta = pq.ParquetFile(path).schema_arrow.metadata or {}
            size = int(meta.get(b"page-size", b"0") or 0)
            if page_size is None:
                page_size = size
            if size != page_size:
                self.report(f"{source}: page-size {size} differs from "
                            f"{page_size} of the runs before it; run "
                            f"'{run}' left out")
                continue
            kept.append((run, path, source))
        self.parts = kept
        return page_size or tracefile.DEFAULT_PAGE_SIZE

    @property
    def runs(self):
        return sorted({run for run, _, _ in self.parts})

    def relation_sql(self):
        """A FROM item over every part, with `run` from the partition."""
        if not self.parts:
            raise DatasetError("no usable run")
        return relation_sql([path for _, path, _ in self.parts])


def relation_sql(paths):
    """A FROM item over these part files, with `run` from the partition."""
    files = ", ".join(sql_string(path) for path in paths)
    return (f"read_parquet([{files}], hive_partitioning = true, "
            "union_by_name = true)")


def _first_line(err):
    return str(err).strip().splitlines()[0] if str(err).strip() else \
        type(err).__name__


def _run_of_part(path):
    """The run of a part file: its run=RUN directory, else its name."""
    parent = os.path.basename(os.path.dirname(os.path.abspath(path)))
    if parent.startswith("run="):
        return parent[len("run="):]
    return run_name(path)


def _unique_runs(sources, taken):
    """Run ids for text traces: their names, made distinct (NAME-2, ...)."""
    names = []
    for source in sources:
        base = name = run_name(source)
        number = 2
        while name in taken:
            name, number = f"{base}-{number}", number + 1
        taken.add(name)
        names.append(name)
    return names


def sql_string(text):
    return "'" + text.replace("'", "''") + "'"


def connect(work_dir, memory_limit=DEFAULT_MEMORY_LIMIT, threads=None):
    """A DuckDB connection that spills to work_dir past memory_limit."""
    import duckdb
    try:
        con = duckdb.connect(config={
            "memory_limit": memory_limit,
            "temp_directory": os.path.join(work_dir, "duckdb-spill"),
            "preserve_insertion_order": False,
            **({"threads": threads} if threads else {})})
    except duckdb.Error as err:
        raise DatasetError(f"--memory-limit {memory_limit}: "
                           f"{_first_line(err)}") from None
    con.execute("SET enable_progress_bar = false")
    return con


@contextlib.contextmanager
def engine_errors():
    """DuckDB's failures as one line (DatasetError), not a traceback."""
    import duckdb
    try:
        yield
    except duckdb.OutOfMemoryException as err:
        raise DatasetError(f"DuckDB ran out of memory: {_first_line(err)}; "
                           "give it more with --memory-limit") from None
    except duckdb.Error as err:
        raise DatasetError(f"DuckDB: {_first_line(err)}") from None


# --- summary, out of core ----------------------------------------------------

# Per file in one small GROUP BY path; distinct pages from a GROUP BY of
# the keys alone (not count(DISTINCT ...), which DuckDB does not spill),
# the path as its 64-bit hash: grouping 100 M records by the path's bytes
# ran out of memory at 512 MB now and then (3.5 M distinct pages), by the
# hash it takes 5 s and never did. A hash shared by two paths of the trace
# is found (the per-file rows have fewer distinct keys than paths) and the
# query is run again on the bytes.
PER_FILE_SQL = """
    WITH per_file AS (
        SELECT path, count(*) AS pages, min(timestamp_us) AS first_us,
               max(timestamp_us) AS last_us, min(line) AS first_line
        FROM {src} WHERE kind = 'read' GROUP BY path),
    unique_pages AS (
        SELECT key, count(*) AS unique_pages
        FROM (SELECT {key} AS key, "offset" FROM {src} WHERE kind = 'read'
              GROUP BY key, "offset")
        GROUP BY key)
    SELECT f.path, pages, unique_pages, first_us, last_us, first_line,
           {file_key} AS key
    FROM per_file f JOIN unique_pages u ON {file_key} = u.key
    ORDER BY first_us, first_line
"""


# The path's key in the distinct-pages query (a test makes it collide).
PATH_KEY = "hash({column})"


def per_file_rows(con, src):
    """(path, pages, unique_pages, first_us, last_us, first_line) per file
    of the read records, in order of first read."""
    rows = con.execute(PER_FILE_SQL.format(
        src=src, key=PATH_KEY.format(column="path"),
        file_key=PATH_KEY.format(column="f.path"))).fetchall()
    if len({row[-1] for row in rows}) < len(rows):
        rows = con.execute(PER_FILE_SQL.format(
            src=src, key="path", file_key="f.path")).fetchall()
    return [row[:-1] for row in rows]


def summary(con, runs, max_request_bytes=1 << 20):
    """What `pagetrace summary --json` says of one trace, computed in
    DuckDB and one streaming pass (requests and seeks follow trace order):
    {"totals", "files", "requests", "seeks"}. The same numbers as
    pagetrace.metrics on the in-memory frame."""
    if len(runs.parts) != 1:
        raise DatasetError("summary takes one run; "
                           f"{len(runs.parts)} given")
    page_size = runs.page_size
    part = runs.parts[0][1]
    known = known_summary(part, page_size)
    if known is None:
        rows = per_file_rows(con, runs.relation_sql())
    else:
        rows = [(path.encode("latin-1"), *numbers)
                for path, *numbers in known["files"]]
    files = []
    for path, pages, unique, first_us, last_us, _ in rows:
        files.append({"path": bytes(path).decode("utf-8", "surrogateescape"),
                      "pages": int(pages), "unique_pages": int(unique),
                      "bytes": int(pages) * page_size,
                      "first_us": int(first_us), "last_us": int(last_us),
                      "span_us": int(last_us - first_us)})
    pages = sum(f["pages"] for f in files)
    unique = sum(f["unique_pages"] for f in files)
    first = min((f["first_us"] for f in files), default=0)
    last = max((f["last_us"] for f in files), default=0)
    duration = int(last - first) if pages else 0
    # Metadata records (a device's pages) count in pages and bytes, and
    # apart; they are not files (metrics.totals).
    devices = [f for f in files if tracefile.is_metadata(f["path"])]
    totals = {"pages": int(pages), "unique_pages": int(unique),
              "bytes": int(pages) * page_size,
              "metadata_pages": sum(f["pages"] for f in devices),
              "metadata_devices": sorted(f["path"] for f in devices),
              "files": len(files) - len(devices),
              "duration_us": duration,
              "throughput_bytes_per_s": (pages * page_size / (duration / 1e6)
                                         if duration else None)}
    if known is not None and known.get("max_request_bytes") == \
            max_request_bytes:
        requests, seeks = known["requests"], known["seeks"]
    else:
        from .outofcore import trace_order
        stream = trace_order(part, page_size, max_request_bytes)
        requests, seeks = stream.requests, stream.seeks
    return {"totals": totals, "files": files, "requests": requests,
            "seeks": seeks}


# --- command line -------------------------------------------------------------

# Text traces (together) larger than this are analysed out of core by
# default; below it the in-memory reader prints the same and is quicker
# (docs/scale.md measures where the two cross).
OUT_OF_CORE_TEXT_BYTES = 64 << 20


def use_out_of_core(args, *sources):
    """--engine, or auto: DuckDB for Parquet input and large text traces."""
    engine = getattr(args, "engine", "auto")
    if engine != "auto":
        return engine == "duckdb"
    if any(os.path.isdir(s) or s.endswith(".parquet") for s in sources):
        return True
    size = 0
    for source in sources:
        try:
            size += os.path.getsize(source) * (
                COMPRESSION_RATIO if source.endswith((".xz", ".gz")) else 1)
        except OSError:
            pass
    return size > OUT_OF_CORE_TEXT_BYTES


# What a compressed trace counts as against OUT_OF_CORE_TEXT_BYTES: traces
# compress 20 to 30 times (samples/firefox-esr-startup.log.xz: 27).
COMPRESSION_RATIO = 20


def cmd_summary(args):
    """pagetrace summary through DuckDB. Returns the exit status."""
    import json
    import sys

    from .escape import escape
    from .outofcore import session
    with session(args) as (open_runs, con):
        runs = open_runs([args.trace], strict=args.strict, summarise=True)
        result = summary(con, runs)
    converted = runs.results[0] if runs.results else None
    if args.json:
        json.dump({"trace": args.trace, "totals": result["totals"],
                   "files": result["files"],
                   "requests": result["requests"], "seeks": result["seeks"],
                   "malformed_lines": converted.malformed_lines
                   if converted else None,
                   "trailer": converted.trailer if converted else None},
                  sys.stdout, indent=1)
        sys.stdout.write("\n")
        return 0
    import pandas

    from .report import first_read_text, text_table
    t0 = min((f["first_us"] for f in result["files"]), default=0)
    if result["files"]:
        # The report's own wording of the time zero, from a one-row frame.
        when = first_read_text(pandas.DataFrame({"ts_us": [t0]}))
        sys.stdout.write(f"times: ms since the first read, {when}\n\n")
    rows = [[escape(f["path"]), f["pages"], f["bytes"],
             (f["first_us"] - t0) / 1e3, (f["last_us"] - t0) / 1e3,
             f["span_us"] / 1e3] for f in result["files"]]
    sys.stdout.write(text_table(["path", "pages", "bytes", "first (ms)",
                                 "last (ms)", "span (ms)"], rows))
    totals = result["totals"]
    rate = totals["throughput_bytes_per_s"]
    sys.stdout.write(
        f"\ntotal: {totals['pages']:,} pages, {totals['bytes']:,} bytes, "
        f"{totals['files']} files in {totals['duration_us'] / 1e3:,.3f} ms"
        f"{f' ({rate / 2**20:,.1f} MiB/s)' if rate else ''}; "
        f"{result['requests']:,} requests, {result['seeks']:,} seeks\n")
    if totals["metadata_pages"]:
        sys.stdout.write(
            f"metadata: {totals['metadata_pages']:,} pages, "
            f"{totals['metadata_pages'] * runs.page_size:,} bytes "
            f"(of the total), from {', '.join(totals['metadata_devices'])}\n")
    return 0


def cmd_convert(args, report):
    """pagetrace convert TRACE... -o DIR. Returns the exit status."""
    if args.run and len(args.run) != len(args.traces):
        report("convert: give --run once per trace, or not at all")
        return 2
    results = convert(args.traces, args.output, runs=args.run,
                      strict=args.strict, report=report)
    if not args.quiet:
        for result in results:
            print(f"{result.path}: {result.records:,} records")
    return 0 if len(results) == len(args.traces) else 1
