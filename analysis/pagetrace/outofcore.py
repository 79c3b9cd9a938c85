"""The analysis verbs out of core (issue 12, docs/scale.md): waste, seeks,
diff, merge (the union) and plot, on a trace's Parquet dataset through
DuckDB and one streaming pass where trace order matters.

Each function returns what its in-memory counterpart returns (the same
dict, DataFrame or rows), so `pagetrace VERB` prints the same whichever
engine computed it; tests/test_scale.py checks that on every sample. Text
traces are converted first (dataset.Runs, in bounded memory); DuckDB is
capped at --memory-limit and spills to --work-dir.
"""
import contextlib
import os
import tempfile
import warnings

from . import dataset, tracewriter
from .tracefile import is_metadata


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
        con = dataset.connect(work, args.memory_limit)
        count = [0]

        def open_runs(sources, strict=False, summarise=False):
            count[0] += 1
            said = []
            runs = dataset.Runs(sources, os.path.join(work, str(count[0])),
                                said.append, strict=strict,
                                summarise=summarise)
            reason = None if runs.parts else (
                said.pop() if said else f"{' '.join(sources)}: no usable run")
            for message in said:
                warnings.warn(message)
            if reason:
                raise dataset.DatasetError(reason)
            return runs
        try:
            with dataset.engine_errors():
                yield open_runs, con
        finally:
            con.close()


def one_run(runs):
    if len(runs.parts) != 1:
        raise dataset.DatasetError(
            f"this verb takes one run; {runs.parts[0][2]} and "
            f"{len(runs.parts) - 1} more given")
    return runs


def _text(path):
    return bytes(path).decode("utf-8", "surrogateescape")


def path_keys(con, *srcs):
    """(key, paths): `key` formats the SQL that stands for a path in the
    groups and joins over pages, {column} the path's column, and `paths`
    maps each key value back to the path's bytes. The key is the path's
    64-bit hash (dataset.PATH_KEY) unless two paths of these inputs share
    one; then the path itself. Grouping 100 M records by the path's bytes
    ran out of memory at 512 MB (dataset.PER_FILE_SQL)."""
    union = " UNION ".join(f"SELECT path FROM {src} GROUP BY path"
                           for src in srcs)
    rows = con.execute(f"SELECT path, {dataset.PATH_KEY.format(column='path')}"
                       f" FROM ({union})").fetchall()
    paths = {key: bytes(path) for path, key in rows}
    if len(paths) == len(rows):
        return dataset.PATH_KEY, paths
    return "{column}", {bytes(path): bytes(path) for path, _ in rows}


def paths_sql(key, src):
    """A FROM item (key, path) over the distinct paths of src."""
    return (f"(SELECT {key.format(column='path')} AS key, path FROM "
            f"(SELECT path FROM {src} GROUP BY path))")


# --- diff -----------------------------------------------------------------

DIFF_SQL = """
    WITH a AS (SELECT {key} AS key, "offset" FROM {a} WHERE kind = 'read'
               GROUP BY key, "offset"),
         b AS (SELECT {key} AS key, "offset" FROM {b} WHERE kind = 'read'
               GROUP BY key, "offset")
    SELECT coalesce(a.key, b.key) AS key,
           count(*) FILTER (WHERE b.key IS NULL) AS only_a,
           count(*) FILTER (WHERE a.key IS NULL) AS only_b,
           count(*) FILTER (WHERE a.key IS NOT NULL
                            AND b.key IS NOT NULL) AS in_both
    FROM a FULL OUTER JOIN b ON a.key = b.key AND a."offset" = b."offset"
    GROUP BY 1
"""


def diff_table(con, runs_a, runs_b):
    """merge.diff_traces of two runs: per file, distinct pages read only in
    A, only in B, in both; most only-in-A first, ties by path."""
    import numpy as np
    import pandas as pd
    a, b = one_run(runs_a).relation_sql(), one_run(runs_b).relation_sql()
    key, paths = path_keys(con, a, b)
    rows = con.execute(DIFF_SQL.format(a=a, b=b, key=key.format(
        column="path"))).fetchall()
    table = pd.DataFrame([r[1:] for r in rows],
                         index=pd.Index([_text(paths[r[0]]) for r in rows],
                                        name="path"),
                         columns=["only_a", "only_b", "both"],
                         dtype=np.int64).sort_index()
    return table.sort_values(["only_a", "only_b", "both"], ascending=False,
                             kind="stable")


# --- waste ------------------------------------------------------------------

# One row per page read: where it was first read, the cause of that read,
# and whether the run used it (an access record) or only mapped it.
WASTE_PAGES_SQL = """
    CREATE TEMP TABLE wpages AS
    WITH reads AS (
        SELECT {key} AS key, "offset", min(line) AS first_line,
               min({{'line': line, 'cause': {cause}}}).cause AS cause
        FROM {src} WHERE kind = 'read' GROUP BY key, "offset"),
    accessed AS (SELECT {key} AS key, "offset" FROM {src}
                 WHERE kind = 'access' GROUP BY key, "offset"),
    mapped AS (SELECT {key} AS key, "offset" FROM {src} WHERE kind = 'map'
               GROUP BY key, "offset")
    SELECT r.key, r.first_line, r.cause,
           a.key IS NOT NULL AS used,
           a.key IS NULL AND m.key IS NOT NULL AS mapped
    FROM reads r
    LEFT JOIN accessed a ON a.key = r.key AND a."offset" = r."offset"
    LEFT JOIN mapped m ON m.key = r.key AND m."offset" = r."offset"
"""

# Per file; a file is metadata (a device node) or not as a whole, which
# waste_summary tells from its path.
WASTE_FILES_SQL = """
    SELECT key, count(*) AS read_pages,
           count(*) FILTER (WHERE used) AS used_pages,
           count(*) FILTER (WHERE mapped) AS mapped_pages,
           min(first_line) AS first_line
    FROM wpages GROUP BY key
"""

# Accessed but never read: hits on pages already cached.
CACHED_SQL = """
    WITH accessed AS (SELECT {key} AS key, "offset", min(line) AS first_line
                      FROM {src} WHERE kind = 'access'
                      GROUP BY key, "offset"),
    reads AS (SELECT {key} AS key, "offset" FROM {src} WHERE kind = 'read'
              GROUP BY key, "offset")
    SELECT a.key, count(*), min(a.first_line) FROM accessed a
    ANTI JOIN reads r ON r.key = a.key AND r."offset" = a."offset"
    GROUP BY a.key
"""


def waste_summary(con, runs):
    """waste.waste_summary of one run, out of core: the same dict."""
    from . import waste
    one_run(runs)
    src = runs.relation_sql()
    if not con.execute(f"SELECT count(*) FROM (SELECT 1 FROM {src} "
                       "WHERE kind = 'access' LIMIT 1)").fetchall()[0][0]:
        version = _format_version(runs.parts[0][1])
        raise waste.NoAccessRecordsError(
            f"no access records in a version {version} trace, so used "
            f"pages cannot be told from unused ones; {waste.RECORD_HINT}")
    columns = con.execute(f"SELECT * FROM {src} LIMIT 0").description
    has_cause = any(c[0] == "cause" for c in columns)
    key, paths = path_keys(con, src)
    key = key.format(column="path")
    con.execute("DROP TABLE IF EXISTS wpages")
    con.execute(WASTE_PAGES_SQL.format(
        src=src, key=key, cause="cause" if has_cause else "NULL::BLOB"))
    per_file = {}
    for k, read, used, mapped, line in con.execute(
            WASTE_FILES_SQL).fetchall():
        path = _text(paths[k])
        # (read, used, mapped, first line, metadata pages, metadata line)
        per_file[path] = ((0, 0, 0, None, read, line) if is_metadata(path)
                          else (read, used, mapped, line, 0, None))
    cached = {_text(paths[k]): (int(n), line) for k, n, line in
              con.execute(CACHED_SQL.format(src=src, key=key)).fetchall()}
    by_cause = {}
    if has_cause:
        for k, cause, pages in con.execute(
                "SELECT key, cause, count(*) FROM wpages WHERE NOT used "
                "GROUP BY key, cause").fetchall():
            path = _text(paths[k])
            if is_metadata(path):
                continue
            name = "-" if cause is None else _text(cause)
            counts = by_cause.setdefault(path, {})
            counts[name] = counts.get(name, 0) + int(pages)
    return _waste_dict(runs.page_size, has_cause, per_file, cached, by_cause)


def _format_version(part):
    meta = dataset._pa().parquet.ParquetFile(part).schema_arrow.metadata
    return int((meta or {}).get(b"pagetrace-format", b"1"))


def _by_cause(counts):
    from . import waste
    names = list(counts)
    return waste._by_cause([counts[n] for n in names], names)


def _waste_dict(page_size, has_cause, per_file, cached, by_cause):
    """The dict of waste.waste_summary from per-file counts."""
    read_files = sorted((row[3], path) for path, row in per_file.items()
                        if row[0])
    seen = {path for _, path in read_files}
    only_cached = sorted((line, path) for path, (_, line) in cached.items()
                         if path not in seen)
    files = []
    for _, path in read_files + only_cached:
        read, used, mapped = (int(v) for v in per_file.get(
            path, (0, 0, 0))[:3])
        entry = {"path": path, "read_pages": read, "used_pages": used,
                 "unused_pages": read - used, "mapped_pages": mapped}
        if has_cause:
            entry["unused_by_cause"] = _by_cause(by_cause.get(path, {}))
        entry["accessed_not_read_pages"] = cached.get(path, (0,))[0]
        files.append(entry)
    files.sort(key=lambda f: (-f["unused_pages"], -f["read_pages"]))
    total_cause = {}
    for counts in by_cause.values():
        for name, pages in counts.items():
            total_cause[name] = total_cause.get(name, 0) + pages
    metadata = sorted((row[5], path, int(row[4])) for path, row in
                      per_file.items() if row[4])

    def total(key):
        return sum(f[key] for f in files)
    return {
        "page_size": page_size, "has_cause": has_cause,
        "read_pages": total("read_pages"), "used_pages": total("used_pages"),
        "unused_pages": total("unused_pages"),
        "mapped_pages": total("mapped_pages"),
        "unused_by_cause": _by_cause(total_cause) if has_cause else {},
        "accessed_not_read_pages": total("accessed_not_read_pages"),
        "files": files,
        "metadata": {"read_pages": sum(n for _, _, n in metadata),
                     "files": [{"path": path, "read_pages": n}
                               for _, path, n in metadata]},
    }


# --- seeks ------------------------------------------------------------------

class RequestStream:
    """Requests (replay's grouping, metrics.group_requests) and their seeks
    (metrics.file_seeks) over pages given in order, a batch at a time, with
    the HDD and SSD models' times (model.predict_requests): the in-memory
    figures without holding the pages. A run of adjacent pages that
    crosses a batch boundary is one run."""

    def __init__(self, page_size, max_request_bytes=1 << 20, hdd=None,
                 ssd=None):
        from .model import HDDModel, SSDModel
        self.page_size = page_size
        self.max_pages = max(1, max_request_bytes // page_size)
        self.hdd, self.ssd = hdd or HDDModel(), ssd or SSDModel()
        self.pages = self.requests = self.seeks = self.switches = 0
        self.distance = 0
        self.positioning_ms = 0.0
        self.prev_path = self.prev_offset = None
        self.run_length = 0

    def add(self, path, offset):
        """path: an arrow array of paths (binary, or dictionary-encoded);
        offset: a numpy uint64 array of the same length."""
        pa = dataset._pa()
        if len(offset) == 0:
            return
        if not pa.types.is_dictionary(path.type):
            path = pa.compute.dictionary_encode(path)
        codes = path.indices.to_numpy(zero_copy_only=False)
        self.add_codes(codes, offset, path.dictionary[codes[0]].as_py(),
                       path.dictionary[codes[-1]].as_py())

    def add_codes(self, codes, offset, first_path, last_path):
        """The same with the paths as numbers (equal numbers, same file)
        and the first and last rows' paths as anything that compares as
        the path does across batches."""
        import numpy as np
        n = len(offset)
        if n == 0:
            return
        same_file = np.empty(n, dtype=bool)
        same_file[0] = self.prev_path is not None and \
            first_path == self.prev_path
        same_file[1:] = codes[1:] == codes[:-1]
        end = np.empty(n, dtype=np.uint64)
        end[0] = (self.prev_offset if self.prev_offset is not None
                  else 0) + self.page_size
        np.add(offset[:-1], np.uint64(self.page_size), out=end[1:])
        # A run of adjacent pages of one file starts where the page does not
        # follow the one before; rows before the first start continue the
        # previous batch's run, which is run_length pages long so far.
        starts = np.flatnonzero((offset != end) | ~same_file)
        cut = int(starts[0]) if len(starts) else n
        pages = self.max_pages
        # Requests: a run of L pages is split every max_pages pages
        # (metrics.group_requests): ceil(L / max_pages) of them, and the
        # continued run adds those that start in this batch.
        lengths = np.diff(np.append(starts, n))
        self.requests += int(((lengths + pages - 1) // pages).sum())
        if cut:
            done = self.run_length
            self.requests += (done + cut - 1) // pages - (done - 1) // pages
        self.run_length = n - int(starts[-1]) if len(starts) else \
            self.run_length + n
        if self.prev_path is None:
            # The trace's first request: not a seek in metrics.file_seeks,
            # but the head's position is unknown to the HDD model.
            starts = starts[1:]
            self._position(np.array([np.nan]))
        same = same_file[starts]
        jump = starts[same]
        distance = np.where(offset[jump] >= end[jump], offset[jump] -
                            end[jump], end[jump] - offset[jump])
        switches = len(starts) - len(jump)
        self.seeks += len(starts)
        self.switches += switches
        self.distance += int(distance.sum(dtype=np.uint64))
        self._position(np.concatenate([distance.astype(float),
                                       np.full(switches, np.nan)]))
        self.pages += n
        self.prev_path = last_path
        self.prev_offset = int(offset[-1])

    def _position(self, distances):
        if len(distances):
            self.positioning_ms += float(
                (self.hdd.seek_ms(distances)
                 + self.hdd.rotational_latency_ms).sum())

    def summary(self):
        """model.predict_requests's and the seek report's figures."""
        nbytes = self.pages * self.page_size
        hdd_ms = (self.requests * self.hdd.per_request_ms
                  + self.positioning_ms
                  + nbytes / self.hdd.transfer_bytes_per_s * 1e3)
        return {"requests": self.requests, "bytes": nbytes,
                "seeks": self.seeks, "seek_distance_bytes": self.distance,
                "unknown_distance_seeks": self.switches,
                "file_switches": self.switches, "hdd_s": hdd_ms / 1e3,
                "ssd_s": self.requests * self.ssd.per_request_ms / 1e3
                + nbytes / self.ssd.bandwidth_bytes_per_s}


def trace_order(part, page_size, max_request_bytes=1 << 20, hdd=None,
                ssd=None):
    """RequestStream over the read records of one part file in trace order,
    one row group at a time."""
    pa = dataset._pa()
    stream = RequestStream(page_size, max_request_bytes, hdd, ssd)
    parquet = pa.parquet.ParquetFile(part, read_dictionary=["path"],
                                     pre_buffer=False)
    for group in range(parquet.num_row_groups):
        table = parquet.read_row_group(group, columns=["path", "offset",
                                                       "kind"])
        table = table.filter(pa.compute.equal(table.column("kind"), "read"))
        table = table.unify_dictionaries().combine_chunks()
        if table.num_rows:
            stream.add(table.column("path").chunk(0),
                       table.column("offset").to_numpy())
    return stream


# Rows DuckDB hands over per batch of the sorted pages.
SORT_BATCH_ROWS = 1 << 20


def sorted_order(con, runs, max_request_bytes=1 << 20, hdd=None, ssd=None):
    """RequestStream over the distinct pages read, by path (bytes, as
    replay --sort=file compares them) and offset: DuckDB sorts, out of
    core, and hands the rows over in batches."""
    stream = RequestStream(runs.page_size, max_request_bytes, hdd, ssd)
    src = runs.relation_sql()
    key, _ = path_keys(con, src)
    reader = con.sql(
        f'WITH pages AS (SELECT {key.format(column="path")} AS key, "offset" '
        f"FROM {src} WHERE kind = 'read' GROUP BY key, \"offset\") "
        f'SELECT p.path, g."offset" FROM pages g JOIN {paths_sql(key, src)} p '
        'ON g.key = p.key ORDER BY p.path, g."offset"'
    ).to_arrow_reader(SORT_BATCH_ROWS)
    for batch in reader:
        stream.add(batch.column(0), batch.column(1).to_numpy())
    return stream


def seek_report(con, runs, hdd=None, ssd=None):
    """{"original": ..., "sorted": ...}, each with requests, seeks,
    seek_distance_bytes, hdd_s and ssd_s: metrics.trace_seek_report and
    model.predict_trace of one run."""
    one_run(runs)
    return {"original": trace_order(runs.parts[0][1], runs.page_size,
                                    hdd=hdd, ssd=ssd).summary(),
            "sorted": sorted_order(con, runs, hdd=hdd, ssd=ssd).summary()}


# --- merge (the union) --------------------------------------------------------

# Per page: its earliest time relative to the start (first read) of each
# run it is in, and in how many runs it is (merge.merge_traces).
UNION_SQL = """
    CREATE TEMP TABLE union_pages AS
    WITH starts AS (SELECT run, min(timestamp_us) AS t0 FROM {src}
                    WHERE kind = 'read' GROUP BY run),
    per_run AS (SELECT r.run, {key} AS key, r."offset",
                       min(r.timestamp_us - s.t0) AS rel_us
                FROM {src} r JOIN starts s ON r.run = s.run
                WHERE r.kind = 'read' GROUP BY r.run, key, r."offset")
    SELECT key, "offset", min(rel_us) AS ts_us, count(*) AS runs
    FROM per_run GROUP BY key, "offset"
"""


def write_union(con, runs, out, command):
    """merge.merge_traces written as export.write_trace writes it, streamed
    from DuckDB: a version 1 trace with the extra column `runs`. Returns
    merge.stability's rows: [runs, pages, share] for 1..N."""
    src = runs.relation_sql()
    key, _ = path_keys(con, src)
    con.execute("DROP TABLE IF EXISTS union_pages")
    con.execute(UNION_SQL.format(src=src, key=key.format(column="r.path")))
    out.write(tracewriter.header(runs.page_size, ("runs",),
                                 fields={"command": command}))
    cursor = con.execute(
        'SELECT u.ts_us, p.path, u."offset", u.runs FROM union_pages u '
        f"JOIN {paths_sql(key, src)} p ON u.key = p.key "
        'ORDER BY u.ts_us, p.path, u."offset"')
    while True:
        rows = cursor.fetchmany(100_000)
        if not rows:
            break
        out.write("".join(tracewriter.record_line(ts, bytes(path), offset, (n,))
                          for ts, path, offset, n in rows))
    pages, files, low, high = con.execute(
        "SELECT count(*), count(DISTINCT key), min(ts_us), max(ts_us) "
        "FROM union_pages").fetchall()[0]
    out.write(tracewriter.trailer(pages, runs.page_size, files,
                                  (high - low) if pages else 0))
    counts = dict(con.execute("SELECT runs, count(*) FROM union_pages "
                              "GROUP BY runs").fetchall())
    return [[k, int(counts.get(k, 0)),
             float(counts.get(k, 0) / max(1, pages))]
            for k in range(1, len(runs.parts) + 1)]


# --- plot: the records, downsampled ------------------------------------------

# Read records drawn at most; past this, every k-th read in trace order.
PLOT_POINTS = 1_000_000


def plot_frame(con, runs, mark_unused=False, max_points=PLOT_POINTS):
    """(frame, note): the records to plot, as trace.read_trace's frame. A
    trace of at most max_points reads is all there (so the figure is the
    in-memory one); a larger one keeps every k-th read in trace order
    (note says so), and with `mark_unused` one access record for each of
    those pages that the run accessed, so that unused pages are known for
    them exactly."""
    pa = dataset._pa()
    part = one_run(runs).parts[0][1]
    parquet = pa.parquet.ParquetFile(part, pre_buffer=False)
    names = parquet.schema_arrow.names
    base = ["line", "timestamp_us", "path", "offset", "kind", "page_size"]
    extras = [n for n in names if n not in base and n != "run"]
    n_reads = con.execute(f"SELECT count(*) FROM {runs.relation_sql()} "
                          "WHERE kind = 'read'").fetchall()[0][0]
    step = max(1, -(-n_reads // max_points))
    tables, seen = [], 0
    for group in range(parquet.num_row_groups):
        table = parquet.read_row_group(
            group, columns=["timestamp_us", "path", "offset", "kind"]
            + extras)
        if step > 1:
            is_read = pa.compute.equal(table.column("kind"), "read")
            table = table.filter(is_read)
            keep = (dataset._numpy().arange(seen, seen + table.num_rows)
                    % step) == 0
            seen += table.num_rows
            table = table.filter(pa.array(keep))
        tables.append(table)
    table = pa.concat_tables(tables) if tables else None
    note = ""
    if step > 1:
        note = (f"every {step:,}th of {n_reads:,} reads drawn "
                "(pagetrace plot, out of core)")
        if mark_unused:
            table = _with_accesses(con, runs, table)
    frame = _frame(table, extras, runs.page_size, _format_version(part))
    return frame, note


def _with_accesses(con, runs, sample):
    """The sample and one access record for each of its pages that the
    run accessed."""
    pa = dataset._pa()
    con.register("sample_pages", sample.select(["path", "offset"]))
    accessed = con.sql(
        'SELECT s.path, s."offset" FROM (SELECT DISTINCT path, "offset" '
        f"FROM sample_pages) s WHERE EXISTS (SELECT 1 FROM "
        f"{runs.relation_sql()} a WHERE a.kind = 'access' AND "
        'a.path = s.path AND a."offset" = s."offset")').to_arrow_table()
    con.unregister("sample_pages")
    n = accessed.num_rows
    last = sample.column("timestamp_us")[-1].as_py() if len(sample) else 0
    columns = {"timestamp_us": pa.array([last] * n, pa.uint64()),
               "path": accessed.column("path").cast(pa.binary()),
               "offset": accessed.column("offset").cast(pa.uint64()),
               "kind": pa.array(["access"] * n, pa.string())}
    for name in sample.column_names[4:]:
        columns[name] = pa.nulls(n, pa.binary())
    return pa.concat_tables([sample, pa.table(columns,
                                              schema=sample.schema)])


def _frame(table, extras, page_size, version):
    """trace.read_trace's frame of these records (categories in order of
    first appearance, as there)."""
    import numpy as np
    import pandas as pd

    from .trace import KIND_DTYPE

    def categorical(column):
        values = [None if v is None else v.decode("utf-8", "surrogateescape")
                  for v in column.to_pylist()]
        return pd.Categorical(values, categories=pd.unique(pd.Series(
            [v for v in values if v is not None], dtype=object)))
    columns = {
        "ts_us": table.column("timestamp_us").to_numpy().astype(np.int64),
        "path": categorical(table.column("path")),
        "offset": table.column("offset").to_numpy().astype(np.int64),
        "kind": pd.Categorical(table.column("kind").to_pylist(),
                               dtype=KIND_DTYPE)}
    for name in extras:
        columns[name] = categorical(table.column(name))
    frame = pd.DataFrame(columns)
    frame.attrs.update({"page_size": page_size, "version": version})
    return frame


def annotate(fig, note):
    """Say on the figure that it shows a sample."""
    if note:
        fig.text(0.995, 0.005, note, ha="right", va="bottom",
                 fontsize="xx-small", color="0.3")
    return fig


def seek_rows(con, runs, plan=None, hdd=None, ssd=None):
    """report.seek_rows of one run: file-offset space out of core, the
    replay plan (one row per request, already in memory) as there."""
    from . import metrics, model
    header = ["space", "order", "requests", "seeks", "seek distance (bytes)",
              "HDD model (ms)", "SSD model (ms)"]
    trace = seek_report(con, runs, hdd, ssd)
    spaces = [("file offsets", trace, trace)]
    if plan is not None:
        spaces.append(("physical (plan)", metrics.plan_seek_report(plan),
                       model.predict_plan(plan, hdd, ssd)))
    return header, [[space, order, seeks[order]["requests"],
                     seeks[order]["seeks"],
                     seeks[order]["seek_distance_bytes"],
                     times[order]["hdd_s"] * 1e3, times[order]["ssd_s"] * 1e3]
                    for space, seeks, times in spaces
                    for order in ("original", "sorted")]


def cmd_union(args):
    """pagetrace merge A B ... (the union), out of core. Returns the exit
    status."""
    import sys

    from .report import text_table
    with session(args) as (open_runs, con):
        runs = open_runs(args.traces)
        out = open(args.output, "w", encoding="utf-8",
                   errors="surrogateescape") if args.output else sys.stdout
        try:
            rows = write_union(con, runs, out,
                               "pagetrace merge " + " ".join(args.traces))
        finally:
            if out is not sys.stdout:
                out.close()
    sys.stderr.write(text_table(["runs", "pages", "share"], rows))
    return 0
