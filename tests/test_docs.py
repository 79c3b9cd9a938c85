"""The docs as a reader follows them: every link of README.md and docs/
resolves (the file, and the heading an anchor names); every docs/ path
that code, tests, scripts, man pages or docs cite exists, with the section
they name (`docs/x.md, "Section"`); code comments keep no evidence (dates,
seeds, run counts: those go to docs/lab/); every `pagetrace ...` or tool
command in a guide's code block is one the tool accepts (the analysis
verbs: pagetrace's own parser; the other tools: each option is one their
--help lists); the README fits a screen; its kernel table is
docs/kernels.md's (tests/readme_kernels.py renders it), and every figure
of its "What it found" is in the guide its row links to."""
import ast
import fnmatch
import functools
import io
import pathlib
import re
import shlex
import subprocess
import sys
import tokenize

import pytest

REPO = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "analysis"))
from pagetrace import cli, frontdoor  # noqa: E402
import inventory  # noqa: E402
import readme_kernels  # noqa: E402

PAGETRACE = REPO / ".venv" / "bin" / "pagetrace"
LINK = re.compile(r"(?<!!)\[[^\]]*\]\(([^)\s]+)\)|!\[[^\]]*\]\(([^)\s]+)\)")
CITED = re.compile(r"(?<![\w/.-])(docs/[\w./-]+\.md)")


def tracked(*patterns):
    out = subprocess.run(["git", "ls-files", "-z", "--cached", "--others",
                          "--exclude-standard", "--", *patterns], cwd=REPO,
                         capture_output=True, check=True).stdout
    return [REPO / p for p in out.decode().split("\0") if p]


def markdown_files():
    return [REPO / "README.md"] + [p for p in tracked("docs")
                                   if p.suffix == ".md"]


def without_code(text):
    """The text without fenced and indented code blocks, nor inline code."""
    text = re.sub(r"```.*?```", "", text, flags=re.S)
    text = re.sub(r"(?m)^(?: {4}|\t).*$", "", text)
    return re.sub(r"`[^`\n]*`", "", text)


def slug(heading):
    """GitHub's anchor of a heading."""
    heading = re.sub(r"`", "", heading.strip().lower())
    heading = re.sub(r"[^\w\- ]", "", heading)
    return heading.replace(" ", "-")


def anchors(path):
    seen, out = {}, set()
    for line in path.read_text().splitlines():
        m = re.match(r"#{1,6} (.*)", line)
        if m:
            s = slug(m.group(1))
            n = seen.get(s, 0)
            seen[s] = n + 1
            out.add(s if n == 0 else f"{s}-{n}")
    return out


def broken_links(path):
    broken = []
    for m in LINK.finditer(without_code(path.read_text())):
        target = m.group(1) or m.group(2)
        if re.match(r"[a-z]+:", target):
            continue
        file_part, _, anchor = target.partition("#")
        dest = (path.parent / file_part).resolve() if file_part else path
        if not dest.exists():
            broken.append(f"{target} (no such file)")
        elif anchor and dest.suffix == ".md" and anchor not in anchors(dest):
            broken.append(f"{target} (no such heading)")
    return broken


def test_every_link_resolves():
    found = {str(p.relative_to(REPO)): broken_links(p)
             for p in markdown_files()}
    assert {k: v for k, v in found.items() if v} == {}


def test_every_cited_doc_exists():
    # Code, tests, scripts and man pages cite docs by path.
    missing = set()
    for path in tracked("."):
        if path.suffix in (".png", ".xz", ".gz", ".pack") or \
                not path.is_file() or path.name == "test_docs.py":
            continue
        try:
            text = path.read_text()
        except UnicodeDecodeError:
            continue
        for cited in CITED.findall(text):
            if not (REPO / cited).exists():
                missing.add(f"{path.relative_to(REPO)}: {cited}")
    assert sorted(missing) == []


# Files left out of the two checks below until the change in flight that
# rewrites them lands; the lead removes each line as its change merges.
PENDING = (
    "analysis/pagetrace/tools/launch.py",       # the pack tools' change
    "analysis/pagetrace/tools/launch_plan.py",  # the same
    "analysis/pagetrace/tools/launch_prefetch.py",
    "analysis/pagetrace/tools/packrecord.py",
)
# A citation of a section: `docs/x.md, "Section"` (or `docs/x.md
# ("Section")`; also across comment lines, and `"A" and "B"` for two).
SECTION_CITED = re.compile(r'(?<![\w/.-])(docs/[\w./-]+\.md),?[ \t]+\(?'
                           r'"([^"]{1,200})"((?:,? and "[^"]{1,200}")*)')
# A line break inside a comment or a man page, with what leads its next line.
CONTINUED = re.compile(r'[ \t]*\n[ \t]*(?:\*(?!/)|#+|//|;+|\.\\"|--)?[ \t]*')


def pending(path):
    return any(fnmatch.fnmatch(path, pattern) for pattern in PENDING)


def plain(text):
    """Heading or citation text as compared: no markup, one space, lower."""
    return " ".join(re.sub(r"[`*_]", "", text).split()).lower()


@functools.lru_cache(maxsize=None)
def sections(doc):
    """What a citation of DOC may name: its headings and its bold run-in
    heads (`**On other kernels**, in the kernel matrix ...`)."""
    found = []
    for line in (REPO / doc).read_text().splitlines():
        for pattern in (r"#{1,6} (.*)", r"\*\*([^*]+)\*\*"):
            m = re.match(pattern, line)
            if m:
                found.append(plain(m.group(1)).rstrip(".:"))
    return found


def names_a_section(doc, cited):
    """A section is named by its whole heading or by the heading's words up
    to a colon, comma, parenthesis or the end of a phrase."""
    want = plain(cited)
    return any(h == want or re.match(re.escape(want) + r"[:,( ]", h)
               for h in sections(doc))


def section_citations(text):
    """(doc, section) of each section citation in TEXT."""
    text = CONTINUED.sub(" ", text).replace("\\-", "-")
    for m in SECTION_CITED.finditer(text):
        for section in [m.group(2)] + re.findall(r'"([^"]+)"', m.group(3)):
            yield m.group(1), section


def without_pending_rows(text):
    """docs/files.md without the rows of pending files (their own words)."""
    return "\n".join(line for line in text.splitlines()
                     if not (re.match(r"\| `([^`]+)`", line) and
                             pending(re.match(r"\| `([^`]+)`", line).group(1))))


def test_every_cited_section_exists():
    wrong = []
    for path in tracked("."):
        rel = str(path.relative_to(REPO))
        if path.suffix in (".png", ".xz", ".gz", ".pack") or pending(rel) \
                or rel == "tests/test_docs.py":     # its own examples
            continue
        try:
            text = path.read_text()
        except UnicodeDecodeError:
            continue
        if rel == "docs/files.md":
            text = without_pending_rows(text)
        for doc, section in section_citations(text):
            if (REPO / doc).is_file() and not names_a_section(doc, section):
                wrong.append(f"{rel}: {doc}, \"{section}\"")
    assert wrong == []


def test_section_citations_are_read_across_comment_lines():
    text = ('/* as measured (docs/replay.md, "Slow\n * storage") and\n'
            ' * (docs/replay.md, "No such section") */\n'
            '# docs/tracer.md, "On other kernels" and "Large folios\n'
            '# mapped whole"\n'
            'open("docs/replay.md", "r")\n')
    found = list(section_citations(text))
    assert found == [("docs/replay.md", "Slow storage"),
                     ("docs/replay.md", "No such section"),
                     ("docs/tracer.md", "On other kernels"),
                     ("docs/tracer.md", "Large folios mapped whole")]
    assert [names_a_section(d, s) for d, s in found] == [True, False, True,
                                                          True]


# Evidence: a date, a seed, or a count of runs something happened in.
EVIDENCE = {
    "date": re.compile(r"\b20\d\d-[01]\d-[0-3]\d\b"),
    "seed": re.compile(r"\bseeds? \d", re.I),
    "run count": re.compile(r"\b(?:in|of) \d[\d,]* (?:\w+ ){0,2}(?:runs|trials)\b"
                            r"|\b\d[\d,]* runs? in \d", re.I),
}


def comments(path, text):
    """(line, text) of each comment of a source file (a Python file's
    docstrings too)."""
    kind = inventory.language(path, text)
    if kind == "c":
        for m in re.finditer(r"/\*.*?\*/|//[^\n]*", text, re.S):
            yield text.count("\n", 0, m.start()) + 1, m.group(0)
    elif kind == "python":
        for token in tokenize.generate_tokens(io.StringIO(text).readline):
            if token.type == tokenize.COMMENT:
                yield token.start[0], token.string
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef,
                                 ast.AsyncFunctionDef)) and \
                    ast.get_docstring(node, clean=False):
                yield node.body[0].lineno, ast.get_docstring(node, clean=False)
    else:
        for number, line in enumerate(text.splitlines(), 1):
            m = re.search(r"(?:^|\s)(#.*)$", line)
            if m:
                yield number, m.group(1)


def evidence(path, text):
    """Where a comment of PATH gives a date, a seed or a run count; a
    citation of a lab note's section named by its date is a stable anchor,
    not evidence."""
    found = []
    for line, comment in comments(path, text):
        comment = SECTION_CITED.sub("", CONTINUED.sub(" ", comment))
        for what, pattern in EVIDENCE.items():
            for m in pattern.finditer(comment):
                found.append(f"{path}:{line}: {what}: {m.group(0)!r}")
    return found


def product_sources():
    """The code the project ships and runs, tests aside (a test's comments
    name its fixtures' seeds and runs)."""
    return [p for p in inventory.source_files()
            if not p.startswith("tests/") and not pending(p)
            and not p.endswith(".tsv") and p not in inventory.NO_ROOM]


@pytest.mark.unit
def test_code_comments_keep_no_evidence():
    """Comments state invariants and the kernel's reasons; measurements,
    seeds, run counts and history are dated lab notes (docs/lab/), cited by
    a stable anchor."""
    sources = product_sources()
    assert len(sources) > 150
    found = [f for p in sources for f in evidence(p, (REPO / p).read_text())]
    assert found == []


@pytest.mark.unit
def test_evidence_is_found_where_it_is():
    text = ('/* Measured 2026-11-27 (docs/lab/case-study-firefox.md,\n'
            ' * "2026-11-27"): seed 1217 lost one page, 0 in 30 runs. */\n'
            'int x; // 1 run in 30 lost one\n')
    assert [f.split(": ", 1)[1] for f in evidence("x.c", text)] == [
        "date: '2026-11-27'", "seed: 'seed 1'", "run count: 'in 30 runs'",
        "run count: '1 run in 3'"]
    assert sorted(evidence("y.py", '"""Seeds 1-100 on ext4."""\n# in 90 runs\n')) \
        == ["y.py:1: seed: 'Seeds 1'", "y.py:2: run count: 'in 90 runs'"]


def test_docs_in_three_kinds():
    docs = REPO / "docs"
    assert (docs / "guides").is_dir() and (docs / "lab").is_dir()
    guides = {p.stem for p in (docs / "guides").glob("*.md")}
    assert {"find-what-a-start-reads", "see-what-was-wasted",
            "make-a-start-faster-with-a-pack", "measure-start-up",
            "trace-on-another-kernel"} <= guides
    # Lab notes are dated; the reference is not a run log.
    for lab in (docs / "lab").glob("*.md"):
        assert re.search(r"20\d\d-\d\d-\d\d", lab.read_text()), lab


def guide_commands():
    """(guide, command words) of each pagetrace or tool command in the
    guides' code blocks, and the README's; continuation lines joined."""
    out = []
    for guide in sorted((REPO / "docs" / "guides").glob("*.md")) + [
            REPO / "README.md"]:
        text = guide.read_text()
        blocks = re.findall(r"```\w*\n(.*?)```", text, flags=re.S)
        blocks += ["\n".join(line[4:] for line in m.group(0).splitlines())
                   for m in re.finditer(r"(?m)(?:^ {4}.*\n?)+", text)]
        for block in blocks:
            for line in block.replace("\\\n", " ").splitlines():
                line = line.split(" #")[0].strip()
                first = line.split()[:2]
                if first[:1] == ["sudo"]:
                    first = first[1:]
                # Only command lines: output in the same blocks is prose.
                if first[:1] not in (["pagetrace"], ["pagetrace-launch"]):
                    continue
                words = shlex.split(line.split("|")[0].split(">")[0]
                                    .split("&&")[0]) if line else []
                if words[:1] == ["sudo"]:
                    words = words[1:]
                if words[:1] in (["pagetrace"], ["pagetrace-launch"]):
                    out.append((guide.name, words))
    return out


def help_options(words):
    """The options the tool's --help lists."""
    return _help_options(tuple(words[:2]) if words[0] == "pagetrace"
                         else (words[0],))


@functools.lru_cache(maxsize=None)
def _help_options(tool):
    argv = [str(PAGETRACE), *tool[1:], "--help"]
    if tool[0] == "pagetrace-launch":
        argv = [str(REPO / "launch" / "launch"), "--help"]
    text = subprocess.run(argv, capture_output=True, text=True,
                          timeout=60).stdout
    return set(re.findall(r"(?<![\w-])(--?[A-Za-z][\w-]*)", text))


ANALYSIS_VERBS = set(cli.VERBS)


@pytest.mark.parametrize("guide, words", guide_commands(),
                         ids=lambda v: " ".join(v) if isinstance(v, list)
                         else v)
def test_guide_commands_parse(guide, words):
    # Before `--` or a command's own words: pagetrace's.
    own = words[:words.index("--")] if "--" in words else words
    verb = words[1] if words[0] == "pagetrace" and len(words) > 1 else None
    if verb in ANALYSIS_VERBS and verb != "startup":
        # argparse exits 2, saying why, on anything it does not accept.
        cli.build_parser().parse_args(frontdoor.analysis_argv(own[1:]))
        return
    listed = help_options(words)
    options = [w.split("=")[0] for w in own[1:]
               if w.startswith("-") and w != "-"]
    # -c 'CMD' and the like: only the tool's own options are checked.
    unknown = [o for o in options if o not in listed and not (
        o.startswith("-") and not o.startswith("--") and len(o) > 2
        and all(f"-{c}" in listed for c in o[1:]))]
    assert unknown == [], f"{guide}: {' '.join(words)}"


def test_readme_fits_a_screen():
    lines = (REPO / "README.md").read_text().splitlines()
    assert len(lines) <= 120
    head = "\n".join(lines[:40])
    assert "sudo scripts/demo" in head and "sudo make test" in head
    found = lines.index("## What it found")
    rows = []
    for line in lines[found + 1:]:
        if line.startswith("## "):
            break
        if line.startswith("| ") and not line.startswith("| ---"):
            rows.append(line)
    rows = rows[1:]   # the table's head
    assert 0 < len(rows) <= 10
    assert all("](docs/guides/" in row for row in rows), rows


# ----- the front page from the measurements -----

def test_readme_kernel_table_is_docs_kernels():
    """README's kernel table is the one tests/readme_kernels.py renders
    from docs/kernels.md: run it after a new docs/kernels.md (the matrix
    does)."""
    _, now, table = readme_kernels.rendered()
    assert now == table, "run tests/readme_kernels.py"
    assert len(table) >= 5 and all("not checked" not in row for row in table[3:])


KERNELS_MD = """\
| kernel | release | programs loaded (`trace`, `trace --attach raw_tp`, `trace --used`) | \
`trace` | `trace --used` | `cachetop` | `cachestat` | self-check (`pagetrace doctor`) | \
random scripts (`cachefuzz`) |
| --- | --- | --- | --- | --- | --- | --- | --- | --- |
| 5.10 (quick: a cold cat) | 5.10.0-32-amd64 | trace 0.2.0 (tp_btf, unrolled) | 2 passed \
| not run | not run | not run | 1 passed | 2 refused |
| 6.12 (quick: a cold cat) | 6.12.1 | trace 0.2.0 (tp_btf, bpf_loop) | 2 passed \
| not run | not run | not run | 1 passed | 2 passed |
| arm64-6.1 | 6.1.0-50-arm64 | trace 0.2.0 (tp_btf, bpf_loop) | 9 passed | 5 passed \
| 5 passed | 1 passed | 1 passed | 2 passed |
| host | 6.18.44-x | trace 0.2.0 (tp_btf, bpf_loop) | 8 passed | 5 passed | 4 passed, \
1 failed | 1 passed | 1 passed | 2 passed |

### 5.10

- `doctor` self_check: **passed**: exit 0, 18 columns vouched of trace --attach raw_tp, \
trace --attach tp_btf; not available on this kernel: trace --attach tp_btf: cause: the \
kernel lacks readahead:page_cache_sync_ra, which tell it / cachestat --cgroup: all \
columns: it does not start: cachestat: kernel lacks tracepoint writeback:x, which it needs \
(6 s under TCG)

### 6.12

- `doctor` self_check: **passed**: exit 0, 38 columns vouched of trace (6 s under TCG)

### arm64-6.1

- `trace` attach_ways: **passed**: trace: fault=kprobe, get_pages=kprobe+kretprobe; \
cachestat: fault=kprobe, get_pages=kprobe+kretprobe
"""


def test_readme_kernel_table_says_what_the_matrix_measured():
    """The renderer on a made-up docs/kernels.md: each cell from its checks
    (the random scripts counting for the cache tools), the kprobe fallbacks
    and what the doctor lists as not available said, equal rows merged, a
    failure said; README's old arm64 6.1 row, which said those tools
    refused there, is not what it renders."""
    suites = {"5.10": "bullseye", "6.12": "trixie", "arm64-6.1": "bookworm", "host": "host"}
    table = readme_kernels.render(KERNELS_MD, suites)
    assert table[3:] == [
        "| 5.10 (Debian 11) | yes, without `cause` or metadata records | refused in one line "
        "| passes |",
        "| 6.12 (Debian 13) | yes | yes | passes |",
        "| arm64 6.1 (Debian 12) | yes | yes, through kprobes | passes |",
        "| 6.18 (CI's VM) | yes | fails (1 of 13 checks) | passes |"]
    merged = readme_kernels.render(KERNELS_MD.replace("4 passed, 1 failed", "5 passed"), suites)
    assert merged[4] == "| 6.12 (Debian 13), 6.18 (CI's VM) | yes | yes | passes |"
    old = ("| arm64 6.1 (Debian 12) | yes | refused in one line (no fentry on arm64 before "
           "6.4) |")
    assert old not in table and table[5] != old


def figures(text):
    """The figures of TEXT: each number with the unit that follows it."""
    units = r"×|%| (?:MiB|GiB|KiB|rpm|files|processes|counts|random scripts|mismatches|ms|s)\b"
    return [n + (u or "") for n, u in re.findall(
        rf"(?<![\w.,])(\d+(?:,\d{{3}})*(?:\.\d+)?)({units})?", text)]


def missing_figures(finding, guide_text):
    """The figures of FINDING not in GUIDE_TEXT (its emphasis and line
    breaks aside), each as a whole number."""
    plain = re.sub(r"\s+", " ", guide_text.replace("**", "").replace("`", ""))
    return [f for f in figures(finding.replace("`", ""))
            if not re.search(rf"(?<![\w.,]){re.escape(f)}(?![\d]|[.,]\d)", plain)]


def findings():
    """(finding, guide path) of each row of README's "What it found"."""
    lines = (REPO / "README.md").read_text().splitlines()
    found = lines.index("## What it found")
    rows = []
    for line in lines[found + 1:]:
        if line.startswith("## "):
            break
        m = re.match(r"\| (.+) \| \[[^\]]+\]\((docs/guides/[\w.-]+\.md)\) \|$", line)
        if m:
            rows.append((m.group(1), REPO / m.group(2)))
    return rows


def test_readme_findings_are_in_their_guides():
    """Each figure a finding of the README states is in the guide its row
    links to (where the recipe, the intervals and the sessions are)."""
    rows = findings()
    assert len(rows) >= 6
    assert all(figures(finding) for finding, _ in rows)
    missing = {finding: missing_figures(finding, guide.read_text())
               for finding, guide in rows}
    assert {k: v for k, v in missing.items() if v} == {}


def test_a_figure_not_in_its_guide_is_found():
    guide = "It read **412 MiB** from 230\nfiles, 1.08× faster; 95% CI 76–90%; 399,171 counts."
    assert missing_figures("412 MiB from 230 files, 1.08×, 76–90%, 399,171 counts", guide) == []
    assert missing_figures("413 MiB from 23 files, 1.8×, 41.2 s, 399,172 counts, 90 s, 2.14×",
                           guide) == ["413 MiB", "23 files", "1.8×", "41.2 s", "399,172 counts",
                                      "90 s", "2.14×"]
