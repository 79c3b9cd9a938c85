"""What `pagetrace summary` says of a run, computed in the conversion's
own pass (SummaryPass) and kept beside the part file as `_summary.json`,
tied to the file's size and SHA-256; summary.py uses it only for that
file and otherwise asks DuckDB (docs/scale.md)."""
import os

from pagetrace.scale import libs
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
        np = libs.numpy()
        from pagetrace.scale.request_stream import RequestStream
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
        pa, np = libs.pyarrow(), libs.numpy()
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
        np = libs.numpy()
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
        np = libs.numpy()
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
        np = libs.numpy()
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
        np = libs.numpy()
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
