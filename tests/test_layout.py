"""The map (docs/architecture.md) against the tree: every source file is
named in it and every name in it is a file; the Python package's layers
import only downwards, without a cycle; core/ and tools/ import with numpy,
pandas and pyarrow absent; modules and functions stay short; the version
is written in one file and agrees everywhere it is printed."""
import ast
import os
import pathlib
import re
import subprocess
import sys

import pytest

REPO = pathlib.Path(__file__).resolve().parent.parent
PACKAGE = REPO / "analysis" / "pagetrace"
MAP = REPO / "docs" / "architecture.md"
SYSTEM_PYTHON = "/usr/bin/python3"
# Source files, by what their names end with; tests/test_*.py are named in
# the map as one pattern.
SOURCE_SUFFIXES = (".c", ".h", ".py", ".bt", ".awk", ".tsv")
# Top-level directories that hold no source of their own: what each holds
# instead. Every other top-level directory of the tree is searched for
# source files (test_every_top_level_directory_is_covered).
NOT_SOURCE = {
    "docs": "documentation, checked by tests/test_docs.py",
}
# analysis/ is searched from its package down (notebooks are not modules).
SOURCE_ROOTS = {"analysis": "analysis/pagetrace"}


def top_level_dirs():
    out = subprocess.run(["git", "ls-files", "-z", "--cached", "--others",
                          "--exclude-standard"], cwd=REPO,
                         capture_output=True, check=True).stdout
    return sorted({p.split("/")[0] for p in out.decode().split("\0")
                   if "/" in p})


SOURCE_DIRS = tuple(SOURCE_ROOTS.get(d, d) for d in top_level_dirs()
                    if d not in NOT_SOURCE)
# Layer -> the layers it may import (the package's top, pagetrace/__init__,
# is open to every layer: it holds __version__).
LAYERS = {
    "core": {"core"},
    "tools": {"core", "tools"},
    "analysis": {"core", "analysis"},
    "scale": {"core", "analysis", "scale"},
}
MAX_MODULE_LINES = 600
MAX_FUNCTION_LINES = 80


def tracked(*dirs):
    out = subprocess.run(["git", "ls-files", "-z", "--cached", "--others",
                          "--exclude-standard", "--", *dirs], cwd=REPO,
                         capture_output=True, check=True).stdout
    return [p for p in out.decode().split("\0") if p]


def source_files():
    files = []
    for path in tracked(*SOURCE_DIRS):
        name = os.path.basename(path)
        if re.fullmatch(r"(tests|jobs)/test_[a-z0-9_]+\.py", path):
            continue
        executable = os.access(REPO / path, os.X_OK) and "." not in name
        if path.endswith(SOURCE_SUFFIXES) or executable or name == "VERSION":
            files.append(path)
    return files


def map_names():
    """Every `backticked` token of the map that looks like a file name."""
    text = MAP.read_text()
    return set(re.findall(r"`([^`\s]+)`", text))


def named(path, names):
    """PATH is named when the map has it, or a tail of it from a '/' on."""
    parts = path.split("/")
    return any("/".join(parts[i:]) in names for i in range(len(parts)))


def test_every_top_level_directory_is_covered():
    # Found from the tree, not listed by hand: a new directory is searched
    # for source files, or said here to hold none; the map names each.
    text = MAP.read_text()
    dirs = top_level_dirs()
    assert set(NOT_SOURCE) <= set(dirs), "NOT_SOURCE names a directory " \
        "the tree does not have"
    unnamed = [d for d in dirs if f"`{d}/" not in text]
    assert unnamed == [], "top-level directories not in docs/architecture.md"
    assert {"launch", "diskemu", "samples"} <= {
        d.split("/")[0] for d in SOURCE_DIRS}


def test_every_source_file_is_named_in_the_map():
    names = map_names()
    missing = [p for p in source_files() if not named(p, names)]
    assert missing == [], "not in docs/architecture.md: " + ", ".join(missing)


def test_every_file_the_map_names_exists():
    files = tracked(".")
    dirs = {os.path.dirname(p) for p in files}
    stale = []
    for name in map_names():
        if not name.endswith(SOURCE_SUFFIXES) or "*" in name or \
                name.startswith(".output"):
            continue
        name = name.rstrip("/")
        if not any(p == name or p.endswith("/" + name) for p in files) \
                and name not in dirs:
            stale.append(name)
    assert stale == [], "named in docs/architecture.md, not in the tree: " + \
        ", ".join(sorted(stale))


def modules():
    """(dotted name, path) of every module of the package."""
    for path in sorted(PACKAGE.rglob("*.py")):
        rel = path.relative_to(PACKAGE.parent).with_suffix("")
        parts = list(rel.parts)
        if parts[-1] == "__init__":
            parts.pop()
        yield ".".join(parts), path


def imports_of(name, path):
    """The pagetrace modules that module NAME imports, wherever the import
    statement is (a lazy import inside a function is still a dependency)."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                up = package.split(".")[:len(package.split(".")) - node.level + 1]
                base = ".".join(up + ([base] if base else []))
            found.add(base)
            found.update(f"{base}.{a.name}" for a in node.names)
    known = dict(modules())
    return {m for m in found if m in known and m != name}


@pytest.mark.unit
def test_layers_import_only_downwards():
    wrong = []
    for name, path in modules():
        parts = name.split(".")
        if len(parts) < 2 or parts[1] not in LAYERS:
            continue
        for target in imports_of(name, path):
            layer = target.split(".")[1] if "." in target else None
            if layer is not None and layer not in LAYERS[parts[1]] and \
                    target != "pagetrace.old_paths":
                wrong.append(f"{name} imports {target}")
    assert wrong == []


@pytest.mark.unit
def test_no_import_cycle():
    graph = {name: imports_of(name, path) for name, path in modules()}
    # A package imports its own submodules' names: not a cycle of design.
    for name in graph:
        graph[name] = {t for t in graph[name] if not t.startswith(name + ".")}
    state, cycles = {}, []

    def visit(node, stack):
        state[node] = "open"
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == "open":
                cycles.append(" -> ".join(stack[stack.index(nxt):] + [nxt]))
            elif nxt not in state:
                visit(nxt, stack + [nxt])
        state[node] = "done"

    for node in sorted(graph):
        if node not in state:
            visit(node, [node])
    assert cycles == []


@pytest.mark.unit
def test_the_old_module_paths_are_aliases():
    """pagetrace.X of 0.2 is the module that moved, not a copy of it."""
    probe = ("import importlib, sys; sys.path.insert(0, sys.argv[1]); "
             "from pagetrace.old_paths import MOVED; "
             "bad = [o for o, n in MOVED.items() if importlib.import_module("
             "'pagetrace.' + o) is not importlib.import_module(n)]; "
             "assert not bad, bad")
    done = subprocess.run([sys.executable, "-c", probe, str(PACKAGE.parent)],
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stderr


def standard_library_modules():
    return [name for name, _ in modules()
            if name.split(".")[1:2] in (["core"], ["tools"])]


@pytest.mark.unit
@pytest.mark.skipif(not os.access(SYSTEM_PYTHON, os.X_OK),
                    reason="no system Python")
def test_core_and_tools_import_without_numpy_pandas_pyarrow():
    """Each module of core/ and tools/, alone, on the system Python (which
    has none of them) and on the venv's with them blocked."""
    names = standard_library_modules()
    assert len(names) >= 10
    block = ("import sys\n"
             "class Block:\n"
             "    def find_spec(self, name, path=None, target=None):\n"
             "        if name.split('.')[0] in ('numpy', 'pandas', 'pyarrow',"
             " 'duckdb', 'matplotlib'):\n"
             "            raise ImportError('blocked: ' + name)\n"
             "sys.meta_path.insert(0, Block())\n")
    for python in (SYSTEM_PYTHON, sys.executable):
        for name in names:
            probe = (block + "sys.path.insert(0, sys.argv[1])\n"
                     f"import {name}\n"
                     "assert not {'pandas', 'numpy', 'pyarrow'} & "
                     "set(sys.modules)\n")
            done = subprocess.run([python, "-c", probe, str(PACKAGE.parent)],
                                  capture_output=True, text=True)
            assert done.returncode == 0, (python, name, done.stderr)


def argparse_table(node):
    """A function that is mostly a table of add_argument calls."""
    calls = sum(isinstance(n, ast.Call) and getattr(n.func, "attr", "") in
                ("add_argument", "add_parser", "add_mutually_exclusive_group")
                for n in ast.walk(node))
    return calls >= 10


@pytest.mark.unit
def test_modules_and_functions_are_short():
    long = []
    for name, path in modules():
        source = path.read_text()
        if len(source.splitlines()) > MAX_MODULE_LINES:
            long.append(f"{name}: {len(source.splitlines())} lines")
        for node in ast.walk(ast.parse(source)):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                lines = node.end_lineno - node.lineno + 1
                if lines > MAX_FUNCTION_LINES and not argparse_table(node):
                    long.append(f"{name}.{node.name}: {lines} lines")
    assert long == []


def man_pages():
    return [p for p in tracked() if re.search(r"\.[18]$", p)]


def c_tools():
    """Every program a Makefile installs into bin/ that is built from C (an
    ELF in the tree, not a script)."""
    tools = set()
    for makefile in (p for p in tracked() if p.endswith("Makefile")):
        where = (REPO / makefile).parent
        for name in re.findall(r"install -m 0?755 ([\w.-]+) \S*/bin/",
                               (REPO / makefile).read_text()):
            path = where / name
            assert path.exists(), f"{makefile}: {name} not built (run make)"
            if path.read_bytes()[:4] == b"\x7fELF":
                tools.add(str(path.relative_to(REPO)))
    return sorted(tools)


def test_version_in_one_file():
    """VERSION is the one version; every man page (its .TH source field,
    "pagetrace X.Y.Z") and the readpage script must agree with it, and every
    C tool says it (the Makefiles pass it as PAGETRACE_VERSION). The pages
    and tools are found in the tree, not listed here."""
    version = (PACKAGE / "VERSION").read_text().strip()
    assert re.fullmatch(r"[0-9]+\.[0-9]+\.[0-9]+", version)
    pages = man_pages()
    assert len(pages) >= 9, pages
    for path in pages:
        th = next(line for line in (REPO / path).read_text().splitlines()
                  if line.startswith(".TH "))
        assert re.search(r'"pagetrace ([0-9.]+)"', th), (path, th)
        assert re.search(r'"pagetrace ([0-9.]+)"', th).group(1) == version, (path, th)
    readpage = (REPO / "tracer" / "readpage").read_text()
    assert re.search(r'version="readpage ([0-9.]+)"', readpage).group(1) == version
    assert 'version = "' not in (REPO / "analysis" / "pyproject.toml").read_text()
    tools = c_tools()
    assert len(tools) >= 6, tools
    for tool in tools:
        out = subprocess.run([str(REPO / tool), "--version"],
                             capture_output=True, text=True).stdout
        assert out.split()[-1] == version, tool


# C files still over MAX_MODULE_LINES, each with why; the test fails when
# one of them comes under the limit, so that the list only shrinks.
C_LONG_FILES = {
    # the C reader moved from replay/ as it was; splitting its header
    # parsing from its record parsing is left for a change of its own
    "lib/tracefile.c",
}


def c_sources():
    return [p for p in tracked("tracer", "replay", "launch", "lib", "bench", "tests")
            if p.endswith((".c", ".h"))]


def test_c_files_and_functions_are_short():
    long_files, long_functions = set(), []
    for path in c_sources():
        lines = (REPO / path).read_text().split("\n")
        if len(lines) > MAX_MODULE_LINES:
            long_files.add(path)
        start = None
        # Kernel style: a function's braces stand at the start of a line.
        for number, line in enumerate(lines):
            if line.startswith("{"):
                start = number
            elif line.startswith("}") and start is not None:
                if number - start + 2 > MAX_FUNCTION_LINES:
                    long_functions.append(f"{path}:{start}")
                start = None
    assert long_files == C_LONG_FILES
    assert long_functions == []
