"""The BPF modules of tracer/ as a codebase: every tracer/*.bpf.h compiles
alone (`make check-headers`, scripts/check-headers), includes only at the
top of a file, and one declared sink interface (tracer/sinks.bpf.h) in place
of functions that a header leaves to its includer. Compiling only: no root,
nothing loaded."""
import glob
import os
import re
import subprocess

import pytest

from conftest import REPO

pytestmark = pytest.mark.unit

TRACER = os.path.join(REPO, "tracer")
SINKS = os.path.join(TRACER, "sinks.bpf.h")
TOOLS = ("trace", "cache")
COMMENT = re.compile(r"/\*.*?\*/|//[^\n]*", re.S)
# A static function declared without a body: `static ... name(...);`.
PROTOTYPE = re.compile(r"^static\s[^;{}()]*?\b(\w+)\s*\([^;{}]*\)\s*;", re.M)
# A static function defined: `static ... name(...)` followed by its body.
DEFINITION = r"^static\s[^;{{}}()]*?\b{}\s*\([^;{{}}]*\)\s*\{{"


def bpf_sources():
    return sorted(glob.glob(os.path.join(TRACER, "*.bpf.h")) +
                  glob.glob(os.path.join(TRACER, "*.bpf.c")))


def code_of(path):
    with open(path) as f:
        return COMMENT.sub("", f.read())


def test_every_header_compiles_alone():
    subprocess.run(["make", "-s", "-C", TRACER, ".output/vmlinux.h"], check=True)
    run = subprocess.run([os.path.join(REPO, "scripts", "check-headers"), TRACER],
                         capture_output=True, text=True)
    headers = len(glob.glob(os.path.join(TRACER, "*.bpf.h")))
    assert run.returncode == 0, run.stdout + run.stderr
    assert f": {headers} of {headers} " in run.stdout, run.stdout


def test_check_headers_fails_on_a_header_that_uses_what_it_does_not_include(tmp_path):
    """The gate can fail: a header that uses core_fixes.bpf.h's shim without
    including it is reported, and the script exits 1."""
    subprocess.run(["make", "-s", "-C", TRACER, ".output/vmlinux.h"], check=True)
    os.makedirs(tmp_path / ".output")
    os.symlink(os.path.join(TRACER, ".output", "vmlinux.h"), tmp_path / ".output" / "vmlinux.h")
    (tmp_path / "alone.bpf.h").write_text('#include "vmlinux.h"\n')
    (tmp_path / "leans.bpf.h").write_text(
        '#include "vmlinux.h"\nstatic inline int f(struct inode *i) { return inode_nlink(i); }\n')
    run = subprocess.run([os.path.join(REPO, "scripts", "check-headers"), str(tmp_path)],
                         capture_output=True, text=True)
    assert run.returncode == 1, run.stdout + run.stderr
    assert "leans.bpf.h: does not compile alone" in run.stdout
    assert ": 1 of 2 " in run.stdout


# make check-headers ARCH=arm64: the same headers for arm64, against the
# vmlinux.h of the arm64 static build, made from the kernels' cache's BTF.
ARM64_BTF = os.path.join(os.environ.get("PAGETRACE_KERNELS_CACHE", "/var/lib/pagetrace-kernels"),
                         "arm64", "arm64-6.12", "vmlinux.btf")
ARM64_OUT = os.path.join(REPO, "build", "static-aarch64", "obj", "tracer")
ARM64_REGS = """#include "vmlinux.h"
#if defined(__TARGET_ARCH_arm64)
static inline unsigned long sixth(struct pt_regs *regs) { return regs->r9; }
#endif
"""


def check_headers(*args):
    return subprocess.run([os.path.join(REPO, "scripts", "check-headers"), *args],
                          capture_output=True, text=True)


@pytest.fixture(scope="module")
def arm64_checked():
    if not os.access(ARM64_BTF, os.R_OK):
        pytest.skip(f"no arm64 BTF in the kernels' cache ({ARM64_BTF}): "
                    "python3 tests/kernels/fetch --btf arm64-6.12")
    return subprocess.run(["make", "-s", "-C", REPO, "check-headers", "ARCH=arm64"],
                          capture_output=True, text=True)


def test_every_header_compiles_alone_for_arm64(arm64_checked):
    headers = len(glob.glob(os.path.join(TRACER, "*.bpf.h")))
    out = arm64_checked.stdout + arm64_checked.stderr
    assert arm64_checked.returncode == 0, out
    assert f": {headers} of {headers} " in out and "-D__TARGET_ARCH_arm64" in out, out


def test_an_arm64_branch_is_checked_only_for_arm64(arm64_checked, tmp_path):
    """x86's run never compiles an arm64 branch: a register arm64's
    pt_regs lacks passes there and fails in the arm64 run."""
    subprocess.run(["make", "-s", "-C", TRACER, ".output/vmlinux.h"], check=True)
    (tmp_path / "regs.bpf.h").write_text(ARM64_REGS)
    x86 = check_headers("--arch", "x86", "--output", os.path.join(TRACER, ".output"),
                        str(tmp_path))
    arm64 = check_headers("--arch", "arm64", "--output", ARM64_OUT, str(tmp_path))
    assert x86.returncode == 0 and ": 1 of 1 " in x86.stdout, x86.stdout + x86.stderr
    assert arm64.returncode == 1, arm64.stdout + arm64.stderr
    assert "regs.bpf.h: does not compile alone" in arm64.stdout
    assert "no member named 'r9'" in arm64.stdout


def test_includes_only_at_the_top():
    """No include in the middle or at the bottom of a file: after the first
    line of code (a declaration, a definition, a macro), none."""
    late = []
    for path in bpf_sources():
        code_started = False
        for number, line in enumerate(code_of(path).splitlines(), 1):
            stripped = line.strip()
            if stripped.startswith("#include"):
                if code_started:
                    late.append(f"{os.path.relpath(path, REPO)}:{number}: {stripped}")
            elif stripped and not re.match(r"#\s*(ifndef|define \w+_H$|if|endif)", stripped):
                code_started = True
    assert not late, "includes after code:\n" + "\n".join(late)


def sink_names():
    names = PROTOTYPE.findall(code_of(SINKS))
    assert len(names) >= 10, names
    return names


def test_no_header_leaves_a_function_to_its_includer():
    """Only sinks.bpf.h declares functions that another file defines."""
    left = {}
    for path in glob.glob(os.path.join(TRACER, "*.bpf.h")):
        if path == SINKS:
            continue
        code = code_of(path)
        for name in PROTOTYPE.findall(code):
            if not re.search(DEFINITION.format(re.escape(name)), code, re.M):
                left.setdefault(os.path.basename(path), []).append(name)
    assert not left, f"functions left to the includer, outside sinks.bpf.h: {left}"


@pytest.mark.parametrize("tool", TOOLS)
def test_each_tool_defines_every_sink(tool):
    code = code_of(os.path.join(TRACER, f"{tool}.bpf.c"))
    missing = [name for name in sink_names()
               if not re.search(DEFINITION.format(re.escape(name)), code, re.M)]
    assert not missing, f"{tool}.bpf.c does not define the sinks {missing}"


@pytest.mark.parametrize("tool", TOOLS)
def test_objects_call_nothing_undefined(tool):
    """A sink left undefined compiles (its warning is off for sinks.bpf.h's
    declarations) into a call of an undefined symbol: none in the objects."""
    obj = os.path.join(TRACER, ".output", f"{tool}.bpf.o")
    assert os.path.exists(obj), f"{obj}: missing: run make first"
    nm = "llvm-nm" if subprocess.run(["which", "llvm-nm"], capture_output=True).returncode == 0 \
        else "nm"
    run = subprocess.run([nm, "-u", obj], capture_output=True, text=True, check=True)
    assert run.stdout.split() == [], f"{tool}.bpf.o: undefined: {run.stdout}"


# Evidence in a comment, beyond tests/test_docs.py's dates, seeds and run
# counts: counts of scripts or batches ("in 100 scripts", "100+100 random
# scripts", "one batch of 100").
SCRIPT_COUNT = re.compile(r"\b\d[\d,+]*\s+(?:\w+\s+){0,2}(?:scripts|batch(?:es)?)\b"
                          r"|\bbatch(?:es)? of \d", re.I)


def script_counts(text):
    return [m.group(0) for c in COMMENT.findall(text) for m in SCRIPT_COUNT.finditer(c)]


def test_bpf_comments_keep_no_evidence():
    """Comments of tracer/*.bpf.* state invariants and the kernel's reasons;
    seeds, dates and run counts (tests/test_docs.py's patterns), and counts
    of scripts, are in docs/lab/fault-path-cases.md, cited by its sections."""
    import test_docs
    found = []
    for path in bpf_sources():
        rel = os.path.relpath(path, REPO)
        with open(path) as f:
            text = f.read()
        found += test_docs.evidence(rel, text)
        found += [f"{rel}: script count: {c!r}" for c in script_counts(text)]
    assert found == []


def test_script_counts_are_found():
    text = "/* 4 mismatches in 100+100 random scripts; 5 lost in one batch of 100. */"
    assert script_counts(text) == ["100+100 random scripts", "batch of 1"]


def test_fault_path_names_places_and_tests_that_exist():
    """docs/fault-path.md, "Where a page access is decided": every function
    it names is defined in tracer/, every test it names exists."""
    with open(os.path.join(REPO, "docs", "fault-path.md")) as f:
        doc = f.read()
    section = doc.split("## Where a page access is decided", 1)[1].split("\n## ", 1)[0]
    code = "".join(code_of(p) for p in bpf_sources())
    kernel = {"filemap_get_pages", "filemap_fault"}     # the kernel's, named as events
    functions = set(re.findall(r"`(\w+)\(\)`", section)) - kernel
    assert len(functions) >= 20, functions
    undefined = [f for f in functions
                 if not re.search(r"\b%s\s*\([^;{}]*\)\s*\{" % re.escape(f), code)]
    assert undefined == []
    tests_text = "".join(open(p).read() for p in glob.glob(os.path.join(REPO, "tests", "test_*.py")))
    names = set(re.findall(r"\b(test_\w+)(?!\.py)\b", section)) - {
        n for n in re.findall(r"\b(test_\w+)\.py\b", section)}
    assert len(names) >= 12, names
    assert [n for n in names if f"def {n}(" not in tests_text] == []
    files = set(re.findall(r"\b(test_\w+\.py)\b", section))
    assert [f for f in files if not os.path.exists(os.path.join(REPO, "tests", f))] == []
