"""A dataset read back, out of core: the runs of the inputs (text traces
converted first, in bounded memory; Parquet parts as they are), the DuckDB
connection, and the SQL helpers the out-of-core verbs share (docs/scale.md).
"""
import contextlib
import os
import tempfile
import warnings

from pagetrace.core import tracefile
from pagetrace.scale import libs
from pagetrace.scale.convert import convert, run_name
from pagetrace.scale.libs import DatasetError

# The path's key in the distinct-pages query (a test makes it collide).
PATH_KEY = "hash({column})"
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
        pq = libs.pyarrow().parquet
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
        pq = libs.pyarrow().parquet
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


@contextlib.contextmanager
def session(args):
    """(open_runs, con): open_runs(sources) gives the checked Runs of
    text traces or Parquet inputs, converted into a temporary work
    directory that goes when the verb is done. What the conversion says
    (malformed lines, runs left out) goes out as warnings, as the
    in-memory reader's do; when no run is usable, its reason is the
    error."""
    with tempfile.TemporaryDirectory(prefix="pagetrace-",
                                     dir=args.work_dir) as work:
        con = connect(work, args.memory_limit)
        count = [0]

        def open_runs(sources, strict=False, summarise=False):
            count[0] += 1
            said = []
            runs = Runs(sources, os.path.join(work, str(count[0])),
                                said.append, strict=strict,
                                summarise=summarise)
            reason = None if runs.parts else (
                said.pop() if said else f"{' '.join(sources)}: no usable run")
            for message in said:
                warnings.warn(message)
            if reason:
                raise DatasetError(reason)
            return runs
        try:
            with engine_errors():
                yield open_runs, con
        finally:
            con.close()


def one_run(runs):
    if len(runs.parts) != 1:
        raise DatasetError(
            f"this verb takes one run; {runs.parts[0][2]} and "
            f"{len(runs.parts) - 1} more given")
    return runs


def _text(path):
    return bytes(path).decode("utf-8", "surrogateescape")


def path_keys(con, *srcs):
    """(key, paths): `key` formats the SQL that stands for a path in the
    groups and joins over pages, {column} the path's column, and `paths`
    maps each key value back to the path's bytes. The key is the path's
    64-bit hash (PATH_KEY) unless two paths of these inputs share
    one; then the path itself. Grouping 100 M records by the path's bytes
    ran out of memory at 512 MB (summary.PER_FILE_SQL)."""
    union = " UNION ".join(f"SELECT path FROM {src} GROUP BY path"
                           for src in srcs)
    rows = con.execute(f"SELECT path, {PATH_KEY.format(column='path')}"
                       f" FROM ({union})").fetchall()
    paths = {key: bytes(path) for path, key in rows}
    if len(paths) == len(rows):
        return PATH_KEY, paths
    return "{column}", {bytes(path): bytes(path) for path, _ in rows}


def paths_sql(key, src):
    """A FROM item (key, path) over the distinct paths of src."""
    return (f"(SELECT {key.format(column='path')} AS key, path FROM "
            f"(SELECT path FROM {src} GROUP BY path))")
