"""The pages of a start-up that are the same from run to run (issue 12).

Given N runs of one program (a Parquet dataset written by `pagetrace
convert`, or text traces converted on the way), the consensus is the set of
pages read (or used) in at least K of the N runs, the way Android's iorap
compiles one prefetch list from many launches. Each page carries

* `runs`: in how many runs it appears, and its stability `runs / N`;
* `rank`: the median, over the runs it appears in, of its first-access
  rank in that run (0 = the run's first page);
* `ts_us`: the median of its first time relative to the start of its run.

"Read" is a `read` record. "Used" is the waste definition
(`pagetrace.analysis.waste`, docs/trace-format.md): a page with a `read` record and an
`access` record in the same run; its rank is then that of its first access.

Everything runs in DuckDB over Parquet, so the number and size of the runs
is bounded by disk, not memory.
"""
import glob
import os

from pagetrace.scale import libs
from pagetrace.scale import runs as dataset_runs
from pagetrace.scale.libs import DatasetError
from pagetrace.core import tracewriter
from pagetrace.core.escape import escape

READ_PAGES_SQL = """
    SELECT run, path, "offset", min(timestamp_us) AS first_us,
           min(line) AS first_line
    FROM {src} WHERE kind = 'read' GROUP BY run, path, "offset"
"""

# The waste definition of used: read and accessed in the same run; the
# page's first access gives its place in the run.
USED_PAGES_SQL = """
    SELECT a.run, a.path, a."offset", a.first_us, a.first_line
    FROM (SELECT run, path, "offset", min(timestamp_us) AS first_us,
                 min(line) AS first_line
          FROM {src} WHERE kind = 'access' GROUP BY run, path, "offset") a
    SEMI JOIN (SELECT DISTINCT run, path, "offset" FROM {src}
               WHERE kind = 'read') r
    ON a.run = r.run AND a.path = r.path AND a."offset" = r."offset"
"""

# Per run: each page's place (rank) and time in the run.
RANKED_SQL = """
    WITH run_pages AS ({run_pages})
    SELECT run, path, "offset",
           first_us - min(first_us) OVER (PARTITION BY run) AS rel_us,
           row_number() OVER (PARTITION BY run
                              ORDER BY first_us, first_line) - 1 AS rank
    FROM run_pages
"""

# Per page over the runs.
PER_PAGE_SQL = """
    SELECT path, "offset", count(*) AS runs,
           median(rank) AS rank, median(rel_us) AS rel_us,
           min(rel_us) AS min_rel_us
    FROM {ranked} GROUP BY path, "offset"
"""

PAGES_SQL = ("CREATE TEMP TABLE pages AS "
             + PER_PAGE_SQL.format(ranked="(" + RANKED_SQL + ")"))

# Past this many records in all, runs are ranked a batch at a time and the
# pages counted a bucket at a time, medians taken only for the pages of
# the consensus: one query over 100 M records (1,000 runs) ran out of
# memory at 512 MB, as did medians over every page of a bucket (DuckDB's
# median keeps a buffer per group, and most pages are in one run or a few).
# Batches hold whole runs; buckets are pages by hash.
BATCH_RECORDS = 4_000_000
BUCKET_RECORDS = 4_000_000


def required_runs(n_runs, min_runs=None, min_fraction=None):
    """K from --min-runs or --min-fraction (of N, rounded up); all N runs
    when neither is given."""
    if min_runs is not None:
        if min_runs < 1:
            raise ValueError("--min-runs must be at least 1")
        return min_runs
    if min_fraction is not None:
        if not 0 < min_fraction <= 1:
            raise ValueError("--min-fraction must be in (0, 1]")
        # Rounded up, with a little slack for 0.7 * 10 = 7.000000000000001.
        return max(1, -int(-(min_fraction * n_runs - 1e-9) // 1))
    return n_runs


def build(con, runs, used=False, work_dir=None, min_runs=lambda n: 1):
    """Create the temp table `pages` (one row per page of any run: path,
    offset, runs, rank, rel_us, min_rel_us) and return (N, K): N the
    number of runs that have at least one page, K = min_runs(N). Past
    BATCH_RECORDS records, in batches of runs and buckets of pages
    (ranked runs written as Parquet under work_dir); rank and rel_us are
    then there for the pages in K runs or more, and those in one run."""
    kind = "access" if used else "read"
    pages_sql = USED_PAGES_SQL if used else READ_PAGES_SQL
    con.execute("DROP TABLE IF EXISTS pages")
    batches = _batches(runs)
    if len(batches) == 1 or work_dir is None:
        src = runs.relation_sql()
        con.execute(PAGES_SQL.format(run_pages=pages_sql.format(src=src)))
        n_runs = _count_runs(con, src, kind)
        return n_runs, min_runs(n_runs)
    total = sum(records for batch in batches for _, _, records in batch)
    buckets = -(-total // BUCKET_RECORDS)
    ranked_dir = os.path.join(work_dir, "ranked")
    os.makedirs(ranked_dir, exist_ok=True)
    n_runs = 0
    for index, batch in enumerate(batches):
        src = dataset_runs.relation_sql([path for _, path, _ in batch])
        ranked = RANKED_SQL.format(run_pages=pages_sql.format(src=src))
        out = os.path.join(ranked_dir, f"batch={index}")
        con.execute(
            f'COPY (SELECT path, "offset", rank, rel_us, '
            f'hash(path, "offset") % {buckets} AS bucket FROM ({ranked})) '
            f"TO {dataset_runs.sql_string(out)} (FORMAT parquet, "
            "PARTITION_BY (bucket))")
        n_runs += _count_runs(con, src, kind)
    k = min_runs(n_runs)
    con.execute("CREATE TEMP TABLE pages (path BLOB, \"offset\" UBIGINT, "
                "runs BIGINT, rank DOUBLE, rel_us DOUBLE, "
                "min_rel_us BIGINT)")
    for bucket in range(buckets):
        files = os.path.join(ranked_dir, "*", f"bucket={bucket}", "*.parquet")
        if glob.glob(files):
            _bucket_pages(con, f"read_parquet({dataset_runs.sql_string(files)})",
                          max(k, 2))
    return n_runs, k


def _bucket_pages(con, ranked, k):
    """Insert the pages of one bucket: counted, and with the medians of
    those in k runs or more (a page in one run: its own values)."""
    con.execute("DROP TABLE IF EXISTS bucket_counts")
    con.execute(f"""CREATE TEMP TABLE bucket_counts AS
        SELECT path, "offset", count(*) AS runs, min(rank) AS rank,
               min(rel_us) AS min_rel_us
        FROM {ranked} GROUP BY path, "offset"
        """)
    con.execute(f"""INSERT INTO pages
        SELECT c.path, c."offset", c.runs,
               CASE WHEN c.runs = 1 THEN c.rank ELSE m.rank END,
               CASE WHEN c.runs = 1 THEN c.min_rel_us ELSE m.rel_us END,
               c.min_rel_us
        FROM bucket_counts c LEFT JOIN (
            SELECT r.path, r."offset", median(r.rank) AS rank,
                   median(r.rel_us) AS rel_us
            FROM {ranked} r SEMI JOIN (SELECT path, "offset"
                                       FROM bucket_counts WHERE runs >= {k}) c
            ON r.path = c.path AND r."offset" = c."offset"
            GROUP BY r.path, r."offset") m
        ON c.path = m.path AND c."offset" = m."offset"
        """)
    con.execute("DROP TABLE bucket_counts")


def _count_runs(con, src, kind):
    return int(con.execute(f"SELECT count(DISTINCT run) FROM {src} "
                           f"WHERE kind = '{kind}'").fetchall()[0][0])


def _batches(runs):
    """The part files in batches of whole runs of about BATCH_RECORDS
    records: [[(run, path, records)]]."""
    pq = libs.pyarrow().parquet
    by_run = {}
    for run, path, _ in runs.parts:
        by_run.setdefault(run, []).append(
            (run, path, pq.ParquetFile(path).metadata.num_rows))
    batches, size = [[]], 0
    for parts in by_run.values():
        records = sum(r for _, _, r in parts)
        if batches[-1] and size + records > BATCH_RECORDS:
            batches.append([])
            size = 0
        batches[-1] += parts
        size += records
    return batches


def stability_report(con, n_runs, k, top=20):
    """JSON-ready: how much of the page set is the same from run to run,
    and which files vary most."""
    histogram = con.execute(
        "SELECT runs, count(*) FROM pages GROUP BY runs ORDER BY runs"
    ).fetchall()
    total = sum(n for _, n in histogram)
    in_all = sum(n for r, n in histogram if r == n_runs)
    consensus = sum(n for r, n in histogram if r >= k)
    # Weighted by appearances: of the pages an average run reads, the
    # share that is in the consensus.
    appearances = sum(r * n for r, n in histogram)
    kept = sum(r * n for r, n in histogram if r >= k)
    files = con.execute(f"""
        SELECT path, count(*) AS pages,
               count(*) FILTER (WHERE runs = {n_runs}) AS in_all_runs,
               count(*) FILTER (WHERE runs >= {k}) AS consensus,
               count(*) FILTER (WHERE runs < {n_runs}) AS varying
        FROM pages GROUP BY path
        ORDER BY varying DESC, pages DESC, path LIMIT {int(top)}""").fetchall()
    return {
        "runs": n_runs, "min_runs": k,
        "pages": total, "pages_in_all_runs": in_all,
        "consensus_pages": consensus,
        "share_in_all_runs": in_all / total if total else 0.0,
        "mean_run_share_in_consensus": kept / appearances
        if appearances else 0.0,
        "pages_by_runs": [{"runs": int(r), "pages": int(n)}
                          for r, n in histogram],
        "files_that_vary": [
            {"path": _text(path), "pages": int(p), "in_all_runs": int(a),
             "consensus": int(c), "varying": int(v)}
            for path, p, a, c, v in files if v],
    }


def _text(path):
    return bytes(path).decode("utf-8", "surrogateescape")


def write_trace(con, out, n_runs, k, page_size, command):
    """The consensus as a version 1 trace that `replay --prefetch` reads:
    pages in order of median rank, each with its median relative time as
    timestamp and the extra columns `runs stability rank`. Streams the rows
    from DuckDB in batches. Returns the number of pages written."""
    out.write(tracewriter.header(
        page_size, ("runs", "stability", "rank"), fields={
            "command": command,
            "consensus": f"pages in at least {k} of {n_runs} runs"}))
    cursor = con.execute(f"""
        SELECT CAST(round(rel_us) AS UBIGINT), path, "offset", runs, rank
        FROM pages WHERE runs >= {k}
        ORDER BY rank, rel_us, path, "offset" """)
    pages, files, last_us = 0, set(), 0
    while True:
        rows = cursor.fetchmany(100_000)
        if not rows:
            break
        lines = []
        for ts_us, path, offset, runs, rank in rows:
            files.add(path)
            lines.append(tracewriter.record_line(
                ts_us, bytes(path), offset,
                (runs, f"{runs / n_runs:.3f}", f"{rank:g}")))
            last_us = max(last_us, ts_us)
        out.write("".join(lines))
        pages += len(rows)
    out.write(tracewriter.trailer(pages, page_size, len(files), last_us))
    return pages


def report_text(report):
    """The stability report in words and one table."""
    lines = [
        f"runs: {report['runs']}; consensus: pages in at least "
        f"{report['min_runs']} runs",
        f"pages in any run: {report['pages']:,}; in all runs: "
        f"{report['pages_in_all_runs']:,} "
        f"({100 * report['share_in_all_runs']:.1f}%); in the consensus: "
        f"{report['consensus_pages']:,}",
        f"of the pages a run reads, {100 * report['mean_run_share_in_consensus']:.1f}%"
        " are in the consensus (mean over runs, by pages)",
        "pages by number of runs: " + ", ".join(
            f"{h['runs']}: {h['pages']:,}" for h in report["pages_by_runs"]),
    ]
    if report["files_that_vary"]:
        lines.append("files that vary (pages not in every run):")
        lines += [f"  {f['varying']:>8,} of {f['pages']:>8,}  "
                  f"{escape(f['path'])}" for f in report["files_that_vary"]]
    return "\n".join(lines) + "\n"


def default_work_dir():
    return os.environ.get("TMPDIR", "/tmp")


# --- command line (pagetrace merge --min-runs/--min-fraction/--used) --------

def wants_consensus(args):
    """The consensus when asked for one (--min-runs, --min-fraction,
    --used); plain `merge` is the union, whatever form its inputs have."""
    return (args.min_runs is not None or args.min_fraction is not None
            or args.used)


def cmd_merge(args, report):
    """pagetrace merge, consensus form. Returns the exit status."""
    import json
    import sys
    import tempfile

    with tempfile.TemporaryDirectory(prefix="pagetrace-merge-",
                                     dir=args.work_dir) as work:
        runs = dataset_runs.Runs(args.traces, work, report)
        if not runs.parts:
            report("merge: no usable run")
            return 1
        con = dataset_runs.connect(work, args.memory_limit)
        try:
            with dataset_runs.engine_errors():
                n_runs, k = build(con, runs, used=args.used, work_dir=work,
                                  min_runs=lambda n: required_runs(
                                      n, args.min_runs, args.min_fraction))
        except ValueError as err:
            if isinstance(err, DatasetError):
                raise
            report(f"merge: {err}")
            return 2
        if n_runs == 0:
            what = "access" if args.used else "read"
            report(f"merge: no run has a {what} record"
                   + ("; record them with trace --used" if args.used else ""))
            return 1
        out = open(args.output, "w", encoding="utf-8",
                   errors="surrogateescape") if args.output else sys.stdout
        try:
            write_trace(con, out, n_runs, k, runs.page_size,
                        "pagetrace merge " + " ".join(args.traces))
        finally:
            if out is not sys.stdout:
                out.close()
        summary = stability_report(con, n_runs, k)
        con.close()
    if args.stability:
        with open(args.stability, "w", encoding="utf-8") as out:
            json.dump(summary, out, indent=1)
            out.write("\n")
    sys.stderr.write(report_text(summary))
    return 0
