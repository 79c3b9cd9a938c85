"""The flat module paths of pagetrace 0.2 (`pagetrace.cache`,
`pagetrace.dataset`, ...), kept for one release as aliases of the modules'
places in the layers: `import pagetrace.cache` gives pagetrace.tools.pagecache
itself, the same module object, so that patching one patches the other.
New code imports the layered paths (docs/architecture.md)."""
import importlib
import sys

# old name under pagetrace -> the module that now owns it
MOVED = {
    "tracefile": "pagetrace.core.tracefile",
    "tracewriter": "pagetrace.core.tracewriter",
    "escape": "pagetrace.core.escape",
    "stats": "pagetrace.core.stats",
    "startup_csv": "pagetrace.core.startup_csv",
    "cache": "pagetrace.tools.pagecache",
    "throttle": "pagetrace.tools.throttle",
    "resolve": "pagetrace.tools.resolve_inodes",
    "bench": "pagetrace.tools.startup_bench",
    "trace": "pagetrace.analysis.trace_frame",
    "metrics": "pagetrace.analysis.metrics",
    "model": "pagetrace.analysis.model",
    "merge": "pagetrace.analysis.merge",
    "waste": "pagetrace.analysis.waste",
    "plots": "pagetrace.analysis.plots",
    "report": "pagetrace.analysis.report",
    "compare": "pagetrace.analysis.compare",
    "export": "pagetrace.analysis.export",
    "formats": "pagetrace.analysis.formats",
    "synth": "pagetrace.analysis.synth",
    "startup": "pagetrace.analysis.startup_table",
    "dataset": "pagetrace.scale.dataset",
    "outofcore": "pagetrace.scale.outofcore",
    "consensus": "pagetrace.scale.consensus",
}


class _OldPath:
    """Finds `pagetrace.OLD` and loads it as the module it moved to (a
    meta path finder and loader by their methods: importlib.abc and
    importlib.util cost 19 ms at every start of `pagetrace launch`, which
    delays the prefetch and the command)."""

    def find_spec(self, fullname, path=None, target=None):
        package, _, name = fullname.rpartition(".")
        if package == "pagetrace" and name in MOVED:
            import importlib.util
            return importlib.util.spec_from_loader(fullname, self)
        return None

    def create_module(self, spec):
        return importlib.import_module(MOVED[spec.name.rpartition(".")[2]])

    def exec_module(self, module):
        """Nothing to run: the module it moved to is already loaded."""


def install():
    if not any(isinstance(finder, _OldPath) for finder in sys.meta_path):
        sys.meta_path.append(_OldPath())
