"""The man pages are the tools' reference: each C tool's page names every
long option its --help lists (argp's own --help, --usage and --version
aside), and pagetrace(1) names every verb of the VERBS table."""
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


def roff_text(path):
    """The page's words as a reader sees them: roff's \\- is a hyphen."""
    with open(os.path.join(REPO, path)) as f:
        return f.read().replace("\\-", "-")


@pytest.mark.unit
@pytest.mark.parametrize("tool,page", TOOLS, ids=[t for t, _ in TOOLS])
def test_every_option_of_help_is_in_the_man_page(tool, page):
    binary = os.path.join(REPO, tool)
    assert os.access(binary, os.X_OK), f"make builds {tool}"
    help_text = subprocess.run([binary, "--help"], capture_output=True, text=True,
                               timeout=30).stdout
    options = set(re.findall(r"(?<![\w-])--[a-z][a-z0-9-]*", help_text)) - ARGP_OWN
    assert len(options) >= 3, help_text
    text = roff_text(page)
    missing = sorted(o for o in options if not re.search(re.escape(o) + r"(?![a-z0-9-])", text))
    assert missing == [], f"{page} lacks {missing}"


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
