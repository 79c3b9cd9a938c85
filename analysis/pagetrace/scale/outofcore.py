"""The analysis verbs out of core (issue 12, docs/scale.md): waste, seeks,
diff, merge (the union) and plot, on a trace's Parquet dataset through
DuckDB and one streaming pass where trace order matters.

Each function returns what its in-memory counterpart returns (the same
dict, DataFrame or rows), so `pagetrace VERB` prints the same whichever
engine computed it; tests/test_scale.py checks that on every sample. Text
traces are converted first (runs.Runs, in bounded memory); DuckDB is
capped at --memory-limit and spills to --work-dir.
"""

from pagetrace.scale import libs
from pagetrace.scale.request_stream import RequestStream, trace_order
from pagetrace.scale.runs import _text, one_run, path_keys, paths_sql, session
from pagetrace.core import tracewriter
from pagetrace.core.tracefile import is_metadata


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
    from pagetrace.analysis import waste
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
    meta = libs.pyarrow().parquet.ParquetFile(part).schema_arrow.metadata
    return int((meta or {}).get(b"pagetrace-format", b"1"))


def _by_cause(counts):
    from pagetrace.analysis import waste
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
    pa = libs.pyarrow()
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
            keep = (libs.numpy().arange(seen, seen + table.num_rows)
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
    pa = libs.pyarrow()
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

    from pagetrace.analysis.trace_frame import KIND_DTYPE

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
    from pagetrace.analysis import metrics, model
    from pagetrace.analysis.report import SEEK_HEADER as header
    from pagetrace.core.tables import Bytes
    trace = seek_report(con, runs, hdd, ssd)
    spaces = [("file offsets", trace, trace)]
    if plan is not None:
        spaces.append(("physical (plan)", metrics.plan_seek_report(plan),
                       model.predict_plan(plan, hdd, ssd)))
    return header, [[space, order, seeks[order]["requests"],
                     seeks[order]["seeks"],
                     Bytes(seeks[order]["seek_distance_bytes"]),
                     times[order]["hdd_s"] * 1e3, times[order]["ssd_s"] * 1e3]
                    for space, seeks, times in spaces
                    for order in ("original", "sorted")]


def cmd_union(args):
    """pagetrace merge A B ... (the union), out of core. Returns the exit
    status."""
    import sys

    from pagetrace.core.tables import text_table
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
