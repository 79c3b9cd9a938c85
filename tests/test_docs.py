"""The docs as a reader follows them: every link of README.md and docs/
resolves (the file, and the heading an anchor names); every docs/ path
that code, tests, scripts or man pages cite exists; every `pagetrace ...`
or tool command in a guide's code block is one the tool accepts (the
analysis verbs: pagetrace's own parser; the other tools: each option is
one their --help lists); the README fits a screen."""
import functools
import pathlib
import re
import shlex
import subprocess
import sys

import pytest

REPO = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "analysis"))
from pagetrace import cli, frontdoor  # noqa: E402

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
        if path.suffix in (".png", ".xz", ".gz", ".pack") or not path.is_file():
            continue
        try:
            text = path.read_text()
        except UnicodeDecodeError:
            continue
        for cited in CITED.findall(text):
            if not (REPO / cited).exists():
                missing.add(f"{path.relative_to(REPO)}: {cited}")
    assert sorted(missing) == []


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
