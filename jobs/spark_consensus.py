#!/usr/bin/env python3
"""The consensus of many runs (pagetrace merge --min-runs) on Spark SQL.

Reads a dataset written by `pagetrace convert` (DIR/run=RUN/part-0.parquet,
schema in docs/scale.md) from any file system Spark reaches (local, HDFS,
S3), computes per page the same three numbers as pagetrace.consensus
(`runs`, median first-access `rank`, median relative time `rel_us`) with
the same SQL, and writes them as Parquet to OUT/pages. The driver then
writes the consensus trace and the stability report with pagetrace's own
code (pagetrace.consensus.write_trace, stability_report) from that small
table, so the output is byte for byte what `pagetrace merge` writes.

USAGE
  spark-submit jobs/spark_consensus.py DATASET OUT (--min-runs K |
      --min-fraction F) [--used] [--master URL]

EXAMPLES
  # one machine, all cores (make test-spark installs pyspark and a JRE)
  PYTHONPATH=analysis python jobs/spark_consensus.py runs/ out/ --min-runs 900
  # a cluster: the dataset on shared storage
  spark-submit --master yarn jobs/spark_consensus.py hdfs:///traces/app \\
      hdfs:///traces/app-consensus --min-fraction 0.9
"""
import argparse
import json
import os
import sys

# Spark SQL spelling of pagetrace.consensus's one-query form (RANKED_SQL and
# PER_PAGE_SQL): backquotes for the column `offset` (a keyword), LEFT SEMI
# JOIN, and the exact median of Spark 3.4+ (`median`, not the approximate
# percentile_approx), so that the output is pagetrace merge's byte for byte.
# Spark spills its groups, windows and percentile buffers itself, so the
# job needs no batches.
READ_PAGES = """
    SELECT run, path, `offset`, min(timestamp_us) AS first_us,
           min(line) AS first_line
    FROM records WHERE kind = 'read' GROUP BY run, path, `offset`
"""
USED_PAGES = """
    SELECT a.run, a.path, a.`offset`, a.first_us, a.first_line
    FROM (SELECT run, path, `offset`, min(timestamp_us) AS first_us,
                 min(line) AS first_line
          FROM records WHERE kind = 'access' GROUP BY run, path, `offset`) a
    LEFT SEMI JOIN (SELECT DISTINCT run, path, `offset` FROM records
                    WHERE kind = 'read') r
    ON a.run = r.run AND a.path = r.path AND a.`offset` = r.`offset`
"""
PAGES = """
    WITH run_pages AS ({run_pages}),
    ranked AS (
        SELECT run, path, `offset`,
               first_us - min(first_us) OVER (PARTITION BY run) AS rel_us,
               row_number() OVER (PARTITION BY run
                                  ORDER BY first_us, first_line) - 1 AS rank
        FROM run_pages)
    SELECT path, `offset`, count(*) AS runs,
           median(rank) AS rank, median(rel_us) AS rel_us,
           min(rel_us) AS min_rel_us
    FROM ranked GROUP BY path, `offset`
"""


def main():
    parser = argparse.ArgumentParser(
        description=__doc__.splitlines()[0],
        epilog=__doc__[__doc__.index("USAGE"):],
        formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("dataset")
    parser.add_argument("out")
    parser.add_argument("--min-runs", type=int)
    parser.add_argument("--min-fraction", type=float)
    parser.add_argument("--used", action="store_true")
    parser.add_argument("--master", default=None,
                        help="Spark master (default: spark-submit's, or "
                        "local[*])")
    args = parser.parse_args()

    from pyspark.sql import SparkSession
    # Run ids stay strings: without this a directory run=7 would be read
    # as the integer 7, and run=007 too.
    builder = SparkSession.builder.appName("pagetrace-consensus").config(
        "spark.sql.sources.partitionColumnTypeInference.enabled", "false")
    if args.master or "SPARK_HOME" not in os.environ:
        builder = builder.master(args.master or "local[*]")
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    records = spark.read.parquet(args.dataset)
    page_sizes = [r[0] for r in records.select("page_size").distinct()
                  .collect()]
    if len(page_sizes) != 1:
        sys.exit(f"spark_consensus: {args.dataset}: runs of different page "
                 f"sizes {sorted(page_sizes)}; convert them apart")
    records.createOrReplaceTempView("records")
    kind = "access" if args.used else "read"
    n_runs = records.where(f"kind = '{kind}'").select("run").distinct() \
        .count()
    pages = spark.sql(PAGES.format(
        run_pages=USED_PAGES if args.used else READ_PAGES))
    pages_dir = os.path.join(args.out, "pages")
    pages.write.mode("overwrite").parquet(pages_dir)
    spark.stop()
    write_outputs(pages_dir, args, n_runs, page_sizes[0])
    return 0


def write_outputs(pages_dir, args, n_runs, page_size):
    """consensus.log and stability.json from the pages table, by
    pagetrace.consensus (local path of the pages table)."""
    import duckdb

    from pagetrace import consensus
    k = consensus.required_runs(n_runs, args.min_runs, args.min_fraction)
    con = duckdb.connect()
    con.execute(
        "CREATE TEMP TABLE pages AS SELECT path, \"offset\", runs, rank, "
        f"rel_us FROM read_parquet('{pages_dir}/*.parquet')")
    # Names are bytes; those that are not UTF-8 go out as they came in.
    with open(os.path.join(args.out, "consensus.log"), "w",
              encoding="utf-8", errors="surrogateescape") as out:
        consensus.write_trace(con, out, n_runs, k, page_size,
                              f"spark_consensus {args.dataset}")
    report = consensus.stability_report(con, n_runs, k)
    with open(os.path.join(args.out, "stability.json"), "w",
              encoding="utf-8") as out:
        json.dump(report, out, indent=1)
        out.write("\n")
    sys.stderr.write(consensus.report_text(report))


if __name__ == "__main__":
    sys.exit(main())
