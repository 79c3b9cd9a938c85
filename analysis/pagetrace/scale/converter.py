"""Text trace blocks to Arrow tables, checked as the reader contract says
(docs/trace-format.md, "Readers"), for `convert` (convert.py). Records
are checked in three tiers: the typed path takes a block whose every line
arrow's CSV parser reads as the declared columns with integer times and
offsets (names, kinds and extras as dictionaries, so each distinct value is
checked once); a block it cannot take goes to the fast path (arrow, every
field as bytes, vectorised checks); and every line either of them does not
accept goes, one at a time, to the reference line checker of the core
reader, which gives the verdict and the reason. Memory holds a few blocks
(BLOCK_BYTES of text each), whatever the size of the trace.
"""
import concurrent.futures
import gzip
import lzma
import os

from pagetrace.core import tracefile
from pagetrace.scale import libs
from pagetrace.scale.summary_pass import SummaryPass
from pagetrace.core.escape import EscapeError, unescape_bytes

# Text read per step. Peak memory is a small multiple of it (the block, its
# arrow columns, the Parquet writer's page buffers).
BLOCK_BYTES = 8 << 20
PART_NAME = "part-0.parquet"
RECORD_KINDS = tracefile.RECORD_KINDS
# Decimal strings of at most 19 digits always fit in 64 bits; longer ones go
# to the reference checker, which knows the exact limit.
_SAFE_UNSIGNED = r"^[0-9]{1,19}$"
WARN_LINES = tracefile.WARN_LINES


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
        pa = libs.pyarrow()
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
        pa, np = self.pa, libs.numpy()
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
        pa, np = self.pa, libs.numpy()
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
        line = pa.array(libs.numpy().arange(first_line, first_line + rows,
                                        dtype="uint64"))
        result = pa.table([line, ts, path, offset, kind,
                           pa.array(libs.numpy().full(rows, self.header.page_size,
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
