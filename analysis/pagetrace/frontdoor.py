"""`pagetrace VERB`: the one front door to every tool, as in git or perf.

The analysis verbs (summary, plot, waste, ...) are pagetrace.cli's. The
others are dispatched from here before any of them is parsed, so that
their own options reach them untouched and so that this module needs the
standard library only:

  trace    the tracer: tracer/trace in the source tree, pagetrace-trace
           installed
  replay   the replayer: replay/replay, or pagetrace-replay
  cachestat, cachetop
           tracer/cachestat and tracer/cachetop, or pagetrace-cachestat
           and pagetrace-cachetop
  launch   launch/launch, or pagetrace-launch: prefetch a pack and start a
           command (it hands sorted prefetches and --refine to
           pagetrace.tools.launch, the planner)
  cache    pagecache (pagetrace.tools.pagecache_cli): status, evict, warm
  pack     pagetrace.tools.packrecord: record a prefetch pack (docs/pack-format.md)
  doctor   pagetrace.tools.doctor: the tools' self-check on the running kernel
  startup  startup-bench (pagetrace.tools.startup_bench); `pagetrace startup RUNS.csv`
           (a CSV and no --trace/--summarize) is still the table and chart
           of a runs CSV, the analysis verb `startup-table`
"""
import argparse
import os
import sys

from pagetrace import __version__
from pagetrace.core.c_tools import C_TOOLS, find_c_tool

PROG = "pagetrace"
# verb -> (module, name of the tool on its own, help line)
PYTHON_TOOLS = {
    "cache": ("tools.pagecache_cli", "pagecache",
              "page cache of files: status, evict, warm (pagecache)"),
    "startup": ("tools.startup_bench", "startup-bench",
                "time a start-up in controlled cache states (startup-bench)"),
    "pack": ("tools.packrecord", "pagetrace pack",
             "record a start-up's used pages into a prefetch pack"),
    "doctor": ("tools.doctor", "pagetrace doctor",
               "check which numbers the tools get right on this kernel"),
}
STARTUP_TABLE = "startup-table"
# Options that make `pagetrace startup ...` the bench, not the CSV table.
_BENCH_MARKERS = ("--trace", "--summarize", "--", "-h", "--help", "-V",
                  "--version")


class HelpFormatter(argparse.RawDescriptionHelpFormatter):
    """Wide enough that `pagetrace --help` lists each verb on one line."""

    def __init__(self, prog):
        super().__init__(prog, max_help_position=24, width=100)
        # argparse measures verbs without their indentation; room for the
        # longest (startup-table) so that it does not wrap.
        self._action_max_length = 20


def version_text(prog=PROG):
    return f"{prog} (pagetrace) {__version__}"


def short_help():
    """The verbs this module runs, for when the analysis layer (and so
    pagetrace.cli's full --help) cannot be imported."""
    lines = [f"usage: {PROG} VERB ...", "", "verbs that need only the standard library:"]
    for verb, (*_, text) in {**C_TOOLS, **PYTHON_TOOLS}.items():
        lines.append(f"  {verb:<12}{text}")
    lines += ["", "examples:",
              "  sudo pagetrace trace --used -x -c ./app > reads.log",
              "  pagetrace replay --sorted reads.log",
              "  sudo pagetrace cachetop -c ./app --json",
              "  sudo pagetrace cache evict --trace reads.log"]
    return "\n".join(lines)


def _is_startup_table(args):
    """`pagetrace startup RUNS.csv [-o STEM]`, the analysis verb's old
    spelling: a positional argument and none of the bench's options."""
    return (any(not a.startswith("-") for a in args)
            and not any(a in _BENCH_MARKERS or a.startswith("--trace=")
                        or a.startswith("--summarize=") for a in args))


def analysis_argv(argv):
    """argv for pagetrace.cli's parser (old spellings mapped)."""
    if argv and argv[0] == "startup" and _is_startup_table(argv[1:]):
        return [STARTUP_TABLE, *argv[1:]]
    return argv


def dispatch(argv):
    """Run a front-door verb that is not an analysis verb; its exit status,
    or None when argv is for pagetrace.cli."""
    if not argv:
        return None
    verb, rest = argv[0], argv[1:]
    if verb in C_TOOLS:
        path = find_c_tool(verb)
        if path is None:
            in_tree, installed, _ = C_TOOLS[verb]
            sys.stderr.write(f"{PROG}: {verb}: neither {in_tree} (run make) "
                             f"nor {installed} (make install) was found\n")
            return 127
        sys.stdout.flush()
        os.execv(path, [f"{PROG} {verb}", *rest])
    if verb in PYTHON_TOOLS and not (verb == "startup"
                                     and _is_startup_table(rest)):
        import importlib
        module = importlib.import_module(f".{PYTHON_TOOLS[verb][0]}",
                                         __package__)
        return module.main(rest, prog=f"{PROG} {verb}")
    return None


def add_front_door(parser, subparsers):
    """-V/--version, and a help line for each verb dispatched here."""
    parser.add_argument("-V", "--version", action="version",
                        version=version_text())
    for verb, (_, _, text) in C_TOOLS.items():
        subparsers.add_parser(verb, help=text, add_help=False)
    for verb, (_, _, text) in PYTHON_TOOLS.items():
        subparsers.add_parser(verb, help=text, add_help=False)


def add_version_options(subparsers):
    """-V/--version on every analysis verb that lacks it."""
    for verb, sub in subparsers.choices.items():
        if verb in C_TOOLS or verb in PYTHON_TOOLS:
            continue
        if not {"-V", "--version"} & set(sub._option_string_actions):
            sub.add_argument("-V", "--version", action="version",
                             version=version_text(f"{PROG} {verb}"))
