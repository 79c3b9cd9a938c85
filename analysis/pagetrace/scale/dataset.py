"""The Parquet dataset of runs (docs/scale.md), as one name: `pagetrace
convert`'s command, and the names 0.2's flat `pagetrace.dataset` had, kept
for one release. The dataset's code is in modules of its own: convert.py
(the conversion; its docstring has the schema), converter.py (text blocks
to Arrow tables), summary_pass.py (summary in the same pass), runs.py (a
dataset read back, DuckDB), summary.py (summary out of core)."""
from pagetrace.core.tracefile import RECORD_KINDS, WARN_LINES  # noqa: F401
from pagetrace.scale.convert import (ConvertResult, convert,  # noqa: F401
                                     convert_trace, run_name)
from pagetrace.scale.converter import BLOCK_BYTES, PART_NAME  # noqa: F401
from pagetrace.scale.libs import DatasetError  # noqa: F401
from pagetrace.scale.runs import (DEFAULT_MEMORY_LIMIT, PATH_KEY,  # noqa: F401
                                  Runs, connect, engine_errors, relation_sql,
                                  sql_string)
from pagetrace.scale.summary import per_file_rows, summary  # noqa: F401
from pagetrace.scale.summary_pass import (SUMMARY_NAME,  # noqa: F401
                                          SummaryPass, known_summary)


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
