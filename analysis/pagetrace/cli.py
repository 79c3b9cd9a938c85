"""`pagetrace` command line: the front door (trace, replay, cache, startup:
see frontdoor.py) and the analysis verbs, from one table (VERBS).

Each verb names the function that adds its arguments, its engine or
engines (commands.py: `memory`, the pandas reader; `duckdb`, out of core)
and the inputs the engine is chosen by; `engine_of` is the one place that
chooses. To add a verb: write its handler(s) in commands.py and its
`add_VERB(parser)` here, and add one row to VERBS (docs/architecture.md,
"Adding a verb")."""
import argparse
import os
import sys
import warnings
from collections import namedtuple

from pagetrace import commands, frontdoor
from pagetrace.analysis import plots, trace_frame, waste
from pagetrace.analysis.formats import FormatError
from pagetrace.scale import consensus, dataset

TRACE_HELP = "trace file, format v1 (.xz and .gz are read too)"
PLAN_HELP = "replay --plan CSV: physical offsets of the requests"
# Text traces (together) larger than this are analysed out of core by
# default; below it the in-memory reader prints the same and is quicker
# (docs/scale.md measures where the two cross).
OUT_OF_CORE_TEXT_BYTES = 64 << 20
# What a compressed trace counts as against OUT_OF_CORE_TEXT_BYTES: traces
# compress 20 to 30 times (samples/firefox-esr-startup.log.xz: 27).
COMPRESSION_RATIO = 20


def add_summary(p):
    p.add_argument("trace", help=TRACE_HELP)
    p.add_argument("--json", action="store_true")
    p.add_argument("--strict", action="store_true",
                   help="fail on the first malformed line")


def add_plot(p):
    p.add_argument("trace", help=TRACE_HELP)
    p.add_argument("--zoom", action="store_true",
                   help="also plot the densest region")
    p.add_argument("--plan", help="replay --plan CSV: physical position "
                   "against time, original and sorted")
    p.add_argument("--waterfall", action="store_true",
                   help="also STEM-waterfall: one bar per file from its "
                   "first to its last read")
    p.add_argument("--top", type=waste.positive_int,
                   default=plots.WATERFALL_FILES,
                   metavar="N", help="files in the waterfall, by bytes; the "
                   "rest share one row (default %(default)s)")
    p.add_argument("--mark-unused", action="store_true",
                   help="ring the pages read but never accessed (a trace "
                   "of trace --used)")
    p.add_argument("-o", "--output", help="file name stem (default: the "
                   "trace's name)")


def add_seeks(p):
    p.add_argument("trace", help=TRACE_HELP)
    p.add_argument("--plan", help=PLAN_HELP)
    p.add_argument("--hdd-rate", type=float,
                   help="HDD transfer rate in MB/s (default 150)")
    p.add_argument("--json", action="store_true")


def add_startup_table(p):
    p.add_argument("runs")
    p.add_argument("-o", "--output", help="file name stem of the bar chart "
                   "(.png and .svg; default: the CSV's name)")


def add_report(p):
    p.add_argument("trace", help=TRACE_HELP)
    p.add_argument("--plan", help=PLAN_HELP)
    p.add_argument("--replay-json", action="append",
                   help="replay --json output; give it once per run")
    p.add_argument("--startup", help="startup-bench runs CSV")
    p.add_argument("-o", "--output", required=True, help="directory")


def add_compare(p):
    p.add_argument("a", help="trace of run A, the baseline")
    p.add_argument("b", help="trace of run B; differences are B − A")
    p.add_argument("--startup-a", metavar="CSV",
                   help="startup-bench runs CSV of A")
    p.add_argument("--startup-b", metavar="CSV",
                   help="startup-bench runs CSV of B")
    p.add_argument("--replay-json-a", action="append", metavar="JSON",
                   help="replay --json of A; once per run")
    p.add_argument("--replay-json-b", action="append", metavar="JSON",
                   help="replay --json of B; once per run")
    p.add_argument("--label-a", help="name of A (default: its file name)")
    p.add_argument("--label-b", help="name of B (default: its file name)")
    p.add_argument("-o", "--output", required=True, help="directory")


def add_export(p):
    p.add_argument("trace", help=TRACE_HELP + "; with --format, a pack "
                   "(pagetrace pack)")
    p.add_argument("--format", choices=("nydus-prefetch", "file-list",
                                        "perfetto"),
                   help="write the pack's list: Nydus's prefetch JSON (path "
                   "and byte ranges) or one path a line (docs/pack-format.md)"
                   "; or, of a trace, a Perfetto timeline (.pftrace, for "
                   "ui.perfetto.dev: docs/perfetto.md)")
    p.add_argument("-o", "--output", help="with --format: the file "
                   "(default: stdout; perfetto: required)")
    p.add_argument("--root", metavar="DIR[:DIR...]", action="append",
                   help="with --format: the image's root was DIR when the pack "
                   "was recorded (a container's layer directories: each, "
                   "colon-separated or repeated, as overlay's lowerdir lists "
                   "them); paths relative to it, files outside it left out")
    p.add_argument("--fio", help="write fio iolog v3 here")
    p.add_argument("--csv", help="write the records as CSV here")
    p.add_argument("--parquet", help="write the records as Parquet here")


def add_merge(p):
    p.add_argument("traces", nargs="+", help="traces, Parquet files or "
                   "directories written by pagetrace convert (one run each "
                   "run=NAME)")
    p.add_argument("-o", "--output", help="merged trace (default: stdout)")
    p.add_argument("--min-runs", type=int, metavar="K",
                   help="consensus: the pages of at least K runs, in order "
                   "of median first-access rank (docs/scale.md)")
    p.add_argument("--min-fraction", type=float, metavar="F",
                   help="consensus: the pages of at least F·N of the N runs")
    p.add_argument("--used", action="store_true",
                   help="consensus of the pages used (read and accessed, "
                   "trace --used) instead of read")
    p.add_argument("--stability", metavar="FILE",
                   help="write the stability report as JSON here")


def add_convert(p):
    p.add_argument("traces", nargs="+", help=TRACE_HELP)
    p.add_argument("-o", "--output", required=True,
                   help="dataset directory (DIR/run=RUN/part-0.parquet)")
    p.add_argument("--run", action="append", metavar="NAME",
                   help="run id of each trace, in order (default: the "
                   "file name without extensions)")
    p.add_argument("--strict", action="store_true",
                   help="refuse a trace at its first malformed line")
    p.add_argument("-q", "--quiet", action="store_true")


def add_diff(p):
    p.add_argument("a", help="trace or Parquet run of A")
    p.add_argument("b", help="trace or Parquet run of B")


def add_waste(p):
    p.add_argument("trace", help="trace of trace --used (format v2)")
    p.add_argument("-j", "--json", action="store_true",
                   help="the counts as JSON (keys in docs/analysis.md)")
    p.add_argument("--top", type=waste.positive_int, metavar="N",
                   help="list only the N files with the most unused pages")


def add_engine_options(p):
    """For a verb with both engines: which one, and DuckDB's resources."""
    p.add_argument("--engine", choices=("auto", "memory", "duckdb"),
                   default="auto", help="duckdb: out of core, for any "
                   "size; memory: the in-memory reader (text traces); "
                   "auto (default): duckdb for Parquet input and for "
                   f"text traces over {OUT_OF_CORE_TEXT_BYTES >> 20} MiB "
                   "(docs/scale.md)")
    p.add_argument("--memory-limit", default=dataset.DEFAULT_MEMORY_LIMIT,
                   metavar="SIZE", help="DuckDB's memory cap; it spills to "
                   "disk past it (default %(default)s)")
    p.add_argument("--work-dir", metavar="DIR", help="where text traces are "
                   "converted and DuckDB spills (default: $TMPDIR or /tmp)")


def _examples(text):
    return {"formatter_class": argparse.RawDescriptionHelpFormatter,
            "epilog": "examples:\n" + text}


# One row a verb, in --help's order. engines: name -> handler (commands.py);
# inputs: the paths the engine is chosen by; duckdb_when: a case that only
# DuckDB does (merge's consensus). Both engines of a verb give the same
# output on the shared cases of tests/test_scale.py (samples/*.log).
Verb = namedtuple("Verb", "help add_arguments engines inputs duckdb_when "
                  "parser_options", defaults=(None, None, {}))
VERBS = {
    "summary": Verb("per-file table and totals", add_summary,
                    {"memory": commands.summary_memory,
                     "duckdb": commands.summary_duckdb},
                    lambda a: [a.trace]),
    "plot": Verb("offset against time (PNG and SVG)", add_plot,
                 {"memory": commands.plot_memory,
                  "duckdb": commands.plot_duckdb},
                 lambda a: [a.trace]),
    "seeks": Verb("seeks and modelled time, original against sorted",
                  add_seeks,
                  {"memory": commands.seeks_memory,
                   "duckdb": commands.seeks_duckdb},
                  lambda a: [a.trace]),
    # `pagetrace startup RUNS.csv` still reaches it (frontdoor.analysis_argv).
    frontdoor.STARTUP_TABLE: Verb(
        "start-up time per state of a runs CSV, mean ± 95%% CI, and a chart",
        add_startup_table, {"memory": commands.startup_memory}),
    "report": Verb("self-contained HTML report and Markdown tables",
                   add_report, {"memory": commands.report_memory}),
    "compare": Verb("two runs side by side: did the change help?",
                    add_compare, {"memory": commands.compare_memory},
                    parser_options=_examples(
                        """  pagetrace compare ra128.log ra8192.log --label-a "read_ahead_kb 128" \\
      --label-b "read_ahead_kb 8192" --startup-a ra128.csv \\
      --startup-b ra8192.csv -o compare/
  pagetrace compare before.log after.log -o compare/""")),
    "export": Verb("fio iolog, CSV, Parquet, a Perfetto timeline; a pack's list",
                   add_export, {"memory": commands.export_memory},
                   parser_options=_examples("""  pagetrace export reads.log --fio reads.iolog
  pagetrace export app.pack --format nydus-prefetch -o prefetch.json
  pagetrace export app.pack --format file-list --root /var/lib/rootfs
  pagetrace export reads.log --format perfetto -o reads.pftrace""")),
    "merge": Verb("union of several runs' traces, or their consensus",
                  add_merge,
                  {"memory": commands.merge_memory,
                   "duckdb": commands.merge_duckdb},
                  lambda a: a.traces, consensus.wants_consensus,
                  _examples("""  pagetrace merge run1.log run2.log run3.log -o merged.log
  pagetrace merge --min-runs 8 runs/ -o prefetch.log   # a convert dataset
  pagetrace merge --min-fraction 0.9 --used run*.log -o used.log
  replay/replay --prefetch prefetch.log""")),
    "convert": Verb("traces to a Parquet dataset, in bounded memory",
                    add_convert, {"duckdb": commands.convert_duckdb},
                    parser_options=_examples("""  pagetrace convert big.log -o dataset/
  pagetrace convert host*/start.log.xz --run a --run b -o runs/
  pagetrace summary dataset/run=big""")),
    "diff": Verb("pages only in A, only in B, in both", add_diff,
                 {"memory": commands.diff_memory,
                  "duckdb": commands.diff_duckdb},
                 lambda a: [a.a, a.b]),
    "waste": Verb("pages read but never used, per file and by cause "
                  "(needs trace --used)", add_waste,
                  {"memory": commands.waste_memory,
                   "duckdb": commands.waste_duckdb},
                  lambda a: [a.trace],
                  parser_options=_examples("""  tracer/trace --used -x -o used.log -c ./app && pagetrace waste used.log
  pagetrace waste --top 10 used.log
  pagetrace waste --json used.log | jq .unused_by_cause""")),
}


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


def engine_of(verb, args):
    """The one choice of engine: a verb's only one; DuckDB for what only it
    does; else --engine, or by the inputs' form and size."""
    row = VERBS[verb]
    if len(row.engines) == 1:
        return next(iter(row.engines))
    if row.duckdb_when and row.duckdb_when(args):
        return "duckdb"
    return "duckdb" if use_out_of_core(args, *row.inputs(args)) else "memory"


EXAMPLES = """examples:
  sudo pagetrace trace -c 'firefox-esr --headless ...' > reads.log
  pagetrace replay --sorted reads.log
  sudo pagetrace cache evict --trace reads.log
  sudo pagetrace startup --trace reads.log -n 20 -- firefox-esr --headless ...
  pagetrace summary reads.log
  pagetrace plot --zoom --waterfall reads.log
  replay/replay --plan reads.log > plan.csv && pagetrace seeks reads.log --plan plan.csv
  pagetrace startup runs.csv -o startup
  pagetrace report reads.log --plan plan.csv --replay-json orig.json \\
      --replay-json sorted.json --startup runs.csv -o report/
  pagetrace export reads.log --fio reads.iolog
  pagetrace merge run1.log run2.log run3.log -o merged.log
  pagetrace diff before.log after.log
  pagetrace compare before.log after.log --startup-a before.csv \\
      --startup-b after.csv -o compare/
  pagetrace waste --top 20 used.log      # a trace of trace --used
  sudo pagetrace pack -o app.pack -- ./app          # record a prefetch pack
  pagetrace launch app.pack -- ./app                # prefetch it and start
  pagetrace export app.pack --format nydus-prefetch -o prefetch.json"""


def build_parser():
    parser = argparse.ArgumentParser(
        prog="pagetrace", description="pagetrace: record the pages a "
        "program reads, replay them, control the page cache, time start-ups, "
        "and analyse the traces. `pagetrace VERB --help` for each verb.",
        formatter_class=frontdoor.HelpFormatter, epilog=EXAMPLES)
    sub = parser.add_subparsers(dest="command", required=True,
                                metavar="VERB")
    # trace, replay, cache, startup: dispatched by frontdoor before parsing.
    frontdoor.add_front_door(parser, sub)
    for verb, row in VERBS.items():
        p = sub.add_parser(verb, help=row.help, **row.parser_options)
        row.add_arguments(p)
        if len(row.engines) > 1:
            add_engine_options(p)
        p.set_defaults(verb=verb)
    frontdoor.add_version_options(sub)
    return parser


def main(argv=None):
    argv = sys.argv[1:] if argv is None else list(argv)
    code = frontdoor.dispatch(argv)
    if code is not None:
        return code
    args = build_parser().parse_args(frontdoor.analysis_argv(argv))
    handler = VERBS[args.verb].engines[engine_of(args.verb, args)]
    # A file name that is not UTF-8 is printed as the bytes it is (escape()
    # leaves bytes from 0x80 up), not a UnicodeEncodeError.
    for stream in (sys.stdout, sys.stderr):
        if hasattr(stream, "reconfigure"):
            stream.reconfigure(errors="surrogateescape")
    # Warnings (malformed lines, lost events, skipped requests) go to
    # stderr as one plain line each.
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            code = handler(args)
        except (trace_frame.TraceError, FormatError, OSError,
                dataset.DatasetError) as err:
            sys.stderr.write(f"pagetrace: {err}\n")
            code = 1
        except ModuleNotFoundError as err:
            # An optional library this verb needs (pyarrow, duckdb: not in
            # Debian 12): one line naming it.
            sys.stderr.write(f"pagetrace: {args.verb}: needs the Python module "
                             f"{err.name}, which is not installed (pip install "
                             f"'pagetrace[scale]')\n")
            code = 1
        finally:
            for warning in caught:
                if issubclass(warning.category, (UserWarning,)):
                    sys.stderr.write(f"pagetrace: {warning.message}\n")
    return code


if __name__ == "__main__":
    sys.exit(main())
