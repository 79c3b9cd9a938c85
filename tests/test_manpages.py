"""The man pages are the tools' reference: each C tool's page has an entry
in OPTIONS for every option its --help lists (argp's own --help, --usage
and --version aside), with the same names and argument, and none for an
option the tool lacks; the target options that trace, cachestat and
cachetop share read the same in their three pages; pagetrace(1) names
every verb of the VERBS table. Where a tool has an option table
(options.tsv, docs/option-tables.md), its page's OPTIONS section is what
the table makes, and every row of the table is in --help."""
import functools
import os
import re
import subprocess
import sys

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(REPO, "analysis"))

from pagetrace.cli import VERBS  # noqa: E402

TOOLS = [("tracer/trace", "tracer/trace.8"), ("tracer/cachestat", "tracer/cachestat.8"),
         ("tracer/cachetop", "tracer/cachetop.8"), ("replay/replay", "replay/replay.1"),
         ("launch/launch", "launch/launch.1"), ("diskemu/diskemu", "diskemu/diskemu.8")]
ARGP_OWN = {"--help", "--usage", "--version"}
# argp's own options and their short names (-h: lib/option.c's hidden alias).
ARGP_NAMES = ARGP_OWN | {"-?", "-V", "-h"}


def roff_text(path):
    """The page's words as a reader sees them: roff's \\- is a hyphen."""
    with open(os.path.join(REPO, path)) as f:
        return f.read().replace("\\-", "-")


@pytest.mark.unit
def test_the_reference_names_every_tool_and_verb():
    """docs/reference.md, the index of the man pages and specs: every C
    tool (by its man page) and every verb."""
    with open(os.path.join(REPO, "docs", "reference.md")) as f:
        text = f.read()
    missing = [page for _, page in TOOLS if f"](../{page})" not in text]
    missing += [v for v in VERBS if f"`{v}`" not in text]
    assert missing == [], f"docs/reference.md lacks {missing}"


@pytest.mark.unit
def test_every_verb_is_in_pagetrace_1():
    text = roff_text("scripts/pagetrace.1")
    missing = sorted(v for v in VERBS if not re.search(r"(?<![\w-])" + re.escape(v) + r"(?![\w-])",
                                                       text))
    assert missing == [], f"scripts/pagetrace.1 lacks {missing}"


# argp's --help: "  -p, --pid=PID   doc" or "      --cgroup=PATH   doc"; an alias
# list "      --plan, --dry-run"; the argument on the last name only.
HELP_ENTRY = re.compile(r"^(?:  (-[^-\s])|      (--[a-z]))")
# One name of an option, with its argument in either spelling (-p PID,
# --pid=PID, --window SIZE, --x[=ARG]).
OPTION_ITEM = re.compile(r"^(--?[a-zA-Z?][\w-]*)(?:\[=(.+)\]|[= ](.+))?$")


def option_items(spec):
    """[(name, argument or None)] of a comma-separated option list."""
    items = [OPTION_ITEM.match(part.strip()) for part in spec.split(", ")]
    return [(m.group(1), m.group(2) or m.group(3)) for m in items if m and m.group(1) != "--"]


@functools.lru_cache(maxsize=None)
def help_of(tool):
    return subprocess.run([os.path.join(REPO, tool), "--help"], capture_output=True,
                          text=True, timeout=30, check=True).stdout


def help_entries(tool):
    """{frozenset of names: argument} of the tool's --help, argp's own aside."""
    entries = {}
    for line in help_of(tool).splitlines():
        if not HELP_ENTRY.match(line):
            continue
        items = option_items(re.split(r"\s{2,}", line.strip())[0])
        names = frozenset(n for n, _ in items) - ARGP_NAMES
        if names:
            entries[names] = items[-1][1]
    return entries


def roff_words(line):
    """A roff line as read: font macros' arguments joined (the alternating
    ones without spaces), font escapes dropped, \\- a hyphen."""
    m = re.match(r"^\.(B|I|BI|IB|BR|RB|IR|RI)\s+(.*)$", line)
    if m:
        args = [a or b for a, b in re.findall(r'"([^"]*)"|(\S+)', m.group(2))]
        line = (" " if m.group(1) in ("B", "I") else "").join(args)
    return re.sub(r"\\f[BIRP]|\\%|\\&", "", line).replace("\\-", "-")


def option_section(page):
    """The lines of the page's OPTIONS section."""
    with open(os.path.join(REPO, page)) as f:
        lines = f.read().splitlines()
    start = lines.index(".SH OPTIONS") + 1
    end = next((i for i in range(start, len(lines)) if lines[i].startswith(".SH ")), len(lines))
    return lines[start:end]


def man_entries(page):
    """{tag's option list: (tag's items, the entry's first paragraph)} of
    each .TP entry of the OPTIONS section that names an option."""
    lines, entries = option_section(page), {}
    for i, line in enumerate(lines):
        if line != ".TP" or i + 1 >= len(lines):
            continue
        items = option_items(roff_words(lines[i + 1]))
        body = []
        for text in lines[i + 2:]:
            if text.split(" ")[0] in (".TP", ".IP", ".PP", ".P", ".LP", ".SS"):
                break
            if not text.startswith('.\\"'):   # a comment: no words on the page
                body.append(roff_words(text))
        if items:
            entries[tuple(items)] = " ".join(body)
    return entries


def option_mismatches(helped, entries):
    """What a page's option entries get wrong against --help: an option
    with no entry, one whose entry lacks its other names or gives another
    argument, an entry for an option --help does not list."""
    tagged = {}
    for items in entries:
        # "-o FILE, --output=FILE" or "-o, --output=FILE": one argument.
        arguments = {a for _, a in items if a}
        shared = next(iter(arguments)) if len(arguments) == 1 else None
        for name, argument in items:
            tagged[name] = ({n for n, _ in items}, argument or shared)
    wrong = []
    for names, argument in sorted(helped.items(), key=lambda e: sorted(e[0])):
        for name in sorted(names):
            if name not in tagged:
                wrong.append(f"{name}: no entry")
            elif not names <= tagged[name][0]:
                wrong.append(f"{name}: its entry lacks {sorted(names - tagged[name][0])}")
            elif tagged[name][1] != argument:
                wrong.append(f"{name}: argument {tagged[name][1]}, --help says {argument}")
    known = set().union(*helped) | ARGP_NAMES
    wrong += [f"{name}: not in --help" for name in sorted(set(tagged) - known)]
    return wrong


@pytest.mark.unit
@pytest.mark.parametrize("tool,page", TOOLS, ids=[t for t, _ in TOOLS])
def test_every_option_has_its_entry_with_its_argument(tool, page):
    """Each option --help lists has an entry in the page's OPTIONS section
    whose tag names all its names and the same argument, and the section
    has no entry for an option the tool does not take."""
    assert os.access(os.path.join(REPO, tool), os.X_OK), f"make builds {tool}"
    helped = help_entries(tool)
    assert len(helped) >= 3, helped
    assert option_mismatches(helped, man_entries(page)) == [], page


@pytest.mark.unit
def test_option_mismatches_are_found():
    helped = {frozenset({"-p", "--pid"}): "PID", frozenset({"--cgroup"}): "PATH",
              frozenset({"--wait"}): None}
    entries = {(("--pid", "PID"),): "", (("--cgroup", "DIR"),): "", (("--gone", None),): ""}
    assert option_mismatches(helped, entries) == [
        "--cgroup: argument DIR, --help says PATH", "--pid: its entry lacks ['-p']",
        "-p: no entry", "--wait: no entry", "--gone: not in --help"]
    assert option_items("-p PID, --pid=PID") == [("-p", "PID"), ("--pid", "PID")]
    assert option_items("--throttle riops=N[,rbps=SIZE]") == [("--throttle", "riops=N[,rbps=SIZE]")]
    assert option_items("--color[=WHEN]") == [("--color", "WHEN")]


# The target options of trace, cachestat and cachetop, one argp child
# (tracer/target_options.c): one --help text, one page text.
TARGET_TOOLS = TOOLS[:3]
TARGET_OPTIONS = ["--pid", "--cgroup", "--container"]


def help_text_of(tool, option):
    """The text --help gives option, its wrapped lines joined."""
    m = re.search(r"^ .*?" + re.escape(option) + r"\S*\s{2,}(.*(?:\n {20,}\S.*)*)", help_of(tool),
                  re.M)
    return " ".join(m.group(1).split()) if m else None


@pytest.mark.unit
@pytest.mark.parametrize("option", TARGET_OPTIONS)
def test_the_target_options_read_the_same_in_every_page(option):
    """Every page that has the option opens its entry with the same
    paragraph, which starts with --help's text for it; the tool's own
    consequences follow in a paragraph of their own."""
    paragraphs, helps = {}, {}
    for tool, page in TARGET_TOOLS:
        found = [body for items, body in man_entries(page).items()
                 if option in (n for n, _ in items)]
        if found:
            paragraphs[page] = " ".join(found[0].split())
            helps[tool] = help_text_of(tool, option)
    assert len(paragraphs) >= 2 and None not in helps.values(), (paragraphs, helps)
    assert len(set(helps.values())) == 1, helps
    assert len(set(paragraphs.values())) == 1, paragraphs
    first = next(iter(paragraphs.values()))
    assert first.startswith(next(iter(helps.values()))), first


# The tools whose options come from tables (docs/option-tables.md): the
# directory, the tool, its page, the tables its page is made of (those of
# its argp table and children, as the directory's `make man` gives them),
# and the rows of those tables the tool does not take.
TABLED = [("launch", "launch/launch", "launch/launch.1", ["options.tsv"], ()),
          ("replay", "replay/replay", "replay/replay.1", ["options.tsv"], ()),
          ("diskemu", "diskemu/diskemu", "diskemu/diskemu.8", ["options.tsv"], ()),
          ("tracer", "tracer/trace", "tracer/trace.8",
           ["trace_options.tsv", "target_options.tsv"], ()),
          ("tracer", "tracer/cachestat", "tracer/cachestat.8",
           ["cachestat_options.tsv", "cache_options.tsv", "target_options.tsv"], ("pid",)),
          ("tracer", "tracer/cachetop", "tracer/cachetop.8",
           ["cachetop_options.tsv", "cache_options.tsv", "target_options.tsv"], ())]
TABLED_IDS = [os.path.basename(tool) for _, tool, _, _, _ in TABLED]


@pytest.mark.unit
@pytest.mark.parametrize("directory,tool,page,tables,left_out", TABLED, ids=TABLED_IDS)
def test_the_options_section_is_what_the_table_makes(directory, tool, page, tables, left_out):
    """The committed page equals packaging/option-table.awk's rewrite of
    it from its tables (`make -C DIR man`): a hand edit between the
    markers, or a table changed without `make man`, fails here."""
    made = subprocess.run(["awk", "-v", "out=page", "-f", "../packaging/option-table.awk",
                           *tables, os.path.basename(page)], cwd=os.path.join(REPO, directory),
                          capture_output=True, text=True, timeout=30)
    assert made.returncode == 0, made.stderr
    with open(os.path.join(REPO, page)) as f:
        committed = f.read()
    assert made.stdout == committed, f"{page} is stale: make -C {directory} man"


def table_rows(directory, tables):
    """[(name, short key or None, argument or None, flags)] of the options
    of the tables in DIRECTORY, read here apart from the generator."""
    rows = []
    for table in tables:
        with open(os.path.join(REPO, directory, table)) as f:
            for line in f:
                cols = line.rstrip("\n").split("\t")
                if line.startswith(("#", "\t")) or not line.strip() or cols[0] == "-":
                    continue
                rows.append((cols[0], None if cols[1] == "-" else cols[1],
                             None if cols[2] == "-" else cols[2], cols[3]))
    return rows


@pytest.mark.unit
@pytest.mark.parametrize("directory,tool,page,tables,left_out", TABLED, ids=TABLED_IDS)
def test_every_table_row_is_in_help(directory, tool, page, tables, left_out):
    """Each row's --name (and -key) is in --help with the row's argument;
    an alias is listed beside its option; a hidden row is not listed, nor
    a row the tool does not take (cachestat's -p)."""
    helped = help_entries(tool)
    by_name = {n: (names, arg) for names, arg in helped.items() for n in names}
    rows = table_rows(directory, tables)
    assert len(rows) >= 5, rows
    wrong = []
    for name, key, argument, flags in rows:
        listed = by_name.get("--" + name)
        if "hidden" in flags or name in left_out:
            wrong += [f"--{name}: hidden or left out, but in --help"] if listed else []
        elif listed is None:
            wrong.append(f"--{name}: not in --help")
        elif key and "-" + key not in listed[0]:
            wrong.append(f"--{name}: -{key} not beside it")
        elif "alias" not in flags and listed[1] != argument:
            wrong.append(f"--{name}: argument {listed[1]}, the table says {argument}")
    assert wrong == [], tool


@pytest.mark.unit
@pytest.mark.parametrize("directory", sorted({d for d, _, _, _, _ in TABLED}))
def test_make_man_makes_each_page_of_the_tables_tested_here(directory):
    """`make -C DIR man` rewrites each page from the tables TABLED gives
    it, so the tests above check the pages as the build makes them."""
    commands = subprocess.run(["make", "-s", "-n", "-C", os.path.join(REPO, directory), "man"],
                              capture_output=True, text=True, timeout=60, check=True).stdout
    made = {}
    for m in re.finditer(r"option-table\.awk ((?:\S+\.tsv )+)(\S+) >", commands):
        made[m.group(2)] = m.group(1).split()
    assert made == {os.path.basename(page): tables
                    for d, _, page, tables, _ in TABLED if d == directory}
