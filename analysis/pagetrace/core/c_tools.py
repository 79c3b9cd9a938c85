"""Where the C tools are: built in the source tree, or installed with the
pagetrace- prefix. Used by the front door (`pagetrace trace ...`) and by
startup-bench (replay, launch). Standard library only."""
import os
import shutil
import sys

# The source tree holds this module in analysis/pagetrace/core.
TREE_TOP = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.realpath(__file__)))))

# verb -> (path in the source tree, installed name, help line)
C_TOOLS = {
    "trace": ("tracer/trace", "pagetrace-trace",
              "record the pages a command reads from storage (the tracer)"),
    "replay": ("replay/replay", "pagetrace-replay",
               "replay a trace's reads: O_DIRECT, sorted, or as a prefetch"),
    "cachestat": ("tracer/cachestat", "pagetrace-cachestat",
                  "page cache hits, misses and dirtied pages, system-wide"),
    "cachetop": ("tracer/cachetop", "pagetrace-cachetop",
                 "page cache hits, misses and dirties per process or file"),
    "launch": ("launch/launch", "pagetrace-launch",
               "prefetch a pack's pages and start the command"),
}


def find_c_tool(verb):
    """The C tool of `verb`: built in the source tree, else installed
    beside the running `pagetrace`, else on PATH; None if absent."""
    in_tree, installed, _ = C_TOOLS[verb]
    candidates = [os.path.join(TREE_TOP, in_tree),
                  os.path.join(os.path.dirname(os.path.realpath(
                      sys.argv[0] or ".")), installed)]
    for path in candidates:
        if os.path.isfile(path) and os.access(path, os.X_OK):
            return path
    return shutil.which(installed)
