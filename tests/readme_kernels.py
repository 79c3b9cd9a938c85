#!/usr/bin/env python3
"""README.md's kernel table, rendered from docs/kernels.md (what the
kernel matrix measured), so that the front page cannot say more or less
than the matrix did. Standard library only.

    tests/readme_kernels.py           rewrite README.md's table
    tests/readme_kernels.py --check   exit 1, with both tables, if it differs

The matrix (tests/kernels/test_kernels.py) rewrites it after docs/kernels.md;
tests/test_docs.py fails when the two disagree. One row per kernel of
docs/kernels.md's first table, rows whose cells are the same merged:
  `trace`   its checks; "without metadata records" where the tracer's
            header said the unrolled walk (no bpf_loop: trace_load.c),
            "without `COLUMN`" where `pagetrace doctor` listed trace's
            COLUMN as not available on this kernel;
  `trace --used`, `cachestat`, `cachetop`  their checks and the random
            scripts' (which run all three); "through fentry/fexit" or
            "through kprobes" where the check attach_ways saw the filemap
            fallbacks attached so;
  `pagetrace doctor`  the self-check's outcome.
A cell: "yes" (all passed), "refused in one line" (all refused), "partly"
(some of each), "fails" or "known bug" (with the counts), "not checked".
"""
import argparse
import os
import re
import sys

REPO = os.path.dirname(os.path.dirname(os.path.realpath(__file__)))
README = os.path.join(REPO, "README.md")
KERNELS_MD = os.path.join(REPO, "docs", "kernels.md")
LISTS = [os.path.join(REPO, "tests", "kernels", name) for name in ("list", "list-arm64")]
MARK = ("<!-- rendered from docs/kernels.md by tests/readme_kernels.py "
        "(tests/test_docs.py checks it): do not edit -->")
HEAD = ["| kernel | `trace` | `trace --used`, `cachestat`, `cachetop` | `pagetrace doctor` |",
        "| --- | --- | --- | --- |"]
DEBIAN = {"bullseye": "Debian 11", "bookworm": "Debian 12", "trixie": "Debian 13",
          "trixie-backports": "Debian 13, backports"}
CACHE_COLUMNS = ("`trace --used`", "`cachetop`", "`cachestat`", "random scripts (`cachefuzz`)")
DOCTOR_COLUMN = "self-check (`pagetrace doctor`)"
CHECK_LINE = re.compile(r"^- `(\w+)` (\w+): \*\*([\w ]+)\*\*(?:: (.*))?$")


def parse(text):
    """(rows, checks) of docs/kernels.md: each row of its first table as
    {"kernel", "release", "loaded", TITLE: {outcome: count}}, and each
    kernel's {(tool, check): (outcome, detail)} from "Each check"."""
    lines = text.splitlines()
    first = next(i for i, l in enumerate(lines) if l.startswith("| kernel | release |"))
    titles = [c.strip() for c in lines[first].strip("|").split(" | ")]
    rows = []
    for line in lines[first + 2:]:
        if not line.startswith("| "):
            break
        cells = dict(zip(titles, (c.strip() for c in line.strip().strip("|").split(" | "))))
        row = {"kernel": cells["kernel"].split(" (")[0], "release": cells["release"],
               "loaded": cells[titles[2]]}
        for title in titles[3:]:
            row[title] = {o: int(n) for n, o in re.findall(r"(\d+) ([a-z ]+?)(?:,|$)",
                                                           cells[title])}
        rows.append(row)
    checks, kernel = {}, None
    for line in lines:
        if line.startswith("### "):
            kernel = checks.setdefault(line[4:].strip(), {})
        m = CHECK_LINE.match(line)
        if m and kernel is not None:
            kernel[m.group(1), m.group(2)] = (m.group(3), m.group(4) or "")
    return rows, checks


def suites():
    """{kernel name: Debian suite} of tests/kernels/list and list-arm64."""
    out = {}
    for path in LISTS:
        with open(path) as f:
            for line in f:
                words = line.split()
                if words and not words[0].startswith("#"):
                    out[words[0]] = words[1]
    return out


def label(row, suite):
    """"6.1 (Debian 12)", "arm64 6.1 (Debian 12)", "6.18 (CI's VM)"."""
    if suite == "host":
        return ".".join(row["release"].split(".")[:2]) + " (CI's VM)"
    name = row["kernel"].replace("arm64-", "arm64 ")
    return f"{name} ({DEBIAN[suite]})" if suite in DEBIAN else name


def verdict(counts):
    """One cell's word from its outcomes' counts."""
    total = sum(counts.values())
    passed, refused = counts.get("passed", 0), counts.get("refused", 0)
    if counts.get("failed"):
        return f"fails ({counts['failed']} of {total} checks)"
    if counts.get("known bug"):
        return f"known bug ({counts['known bug']} of {total} checks)"
    if passed and refused:
        return f"partly ({passed} of {total} checks)"
    return "yes" if passed else "refused in one line" if refused else "not checked"


def trace_cell(row, checks):
    cell = verdict(row["`trace`"])
    without = []
    outcome, detail = checks.get(("doctor", "self_check"), ("", ""))
    if outcome == "passed" and "not available on this kernel: " in detail:
        lacking = detail.split("not available on this kernel: ", 1)[1]
        without += [f"`{c}`" for c in dict.fromkeys(re.findall(
            r"trace --attach \w+: ([\w.]+): ", lacking))]
    loaded = row["loaded"].split("; ")[0]
    if "unrolled" in loaded:
        without.append("metadata records")
    return cell + (", without " + " or ".join(without) if cell == "yes" and without else "")


def cache_cell(row, checks):
    counts = {}
    for title in CACHE_COLUMNS:
        for outcome, n in row.get(title, {}).items():
            counts[outcome] = counts.get(outcome, 0) + n
    cell = verdict(counts)
    outcome, detail = checks.get(("trace", "attach_ways"), ("", ""))
    if cell == "yes" and outcome == "passed":
        ways = set(re.findall(r"=([\w/+]+)", detail))
        if ways and all("kprobe" in w for w in ways):
            cell += ", through kprobes"
        elif ways and all(w.startswith(("fentry", "fexit")) for w in ways):
            cell += ", through fentry/fexit"
    return cell


def doctor_cell(row):
    cell = verdict(row.get(DOCTOR_COLUMN, {}))
    return "passes" if cell == "yes" else cell


def render(kernels_md_text, kernel_suites):
    """README's table (its lines, the mark first) from docs/kernels.md."""
    rows, checks = parse(kernels_md_text)
    merged = {}   # cells -> labels, in docs/kernels.md's order
    for row in rows:
        mine = checks.get(row["kernel"], {})
        cells = (trace_cell(row, mine), cache_cell(row, mine), doctor_cell(row))
        merged.setdefault(cells, []).append(label(row, kernel_suites.get(row["kernel"])))
    return [MARK, *HEAD] + [f"| {', '.join(labels)} | " + " | ".join(cells) + " |"
                            for cells, labels in merged.items()]


def readme_table(readme_text):
    """(start, end) line indexes of README's rendered table, the mark first."""
    lines = readme_text.splitlines()
    start = lines.index(MARK)
    end = start + 1
    while end < len(lines) and lines[end].startswith("|"):
        end += 1
    return start, end


def rendered(kernels=KERNELS_MD, readme=README):
    """(README's text, its table's lines now, the table rendered)."""
    with open(kernels) as f:
        table = render(f.read(), suites())
    with open(readme) as f:
        text = f.read()
    start, end = readme_table(text)
    return text, text.splitlines()[start:end], table


def write_readme(kernels=KERNELS_MD, readme=README):
    """README's table replaced by the one rendered from KERNELS."""
    text, _, table = rendered(kernels, readme)
    lines = text.splitlines()
    start, end = readme_table(text)
    with open(readme, "w") as f:
        f.write("\n".join(lines[:start] + table + lines[end:]) + "\n")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true",
                        help="exit 1 if README.md's table is not docs/kernels.md's")
    parser.add_argument("--kernels", default=KERNELS_MD, help="default: docs/kernels.md")
    parser.add_argument("--readme", default=README, help="default: README.md")
    args = parser.parse_args()
    if not args.check:
        write_readme(args.kernels, args.readme)
        return 0
    _, now, table = rendered(args.kernels, args.readme)
    if now != table:
        sys.stderr.write("readme_kernels: README.md's kernel table is not docs/kernels.md's:\n"
                         + "\n".join(now) + "\nshould be:\n" + "\n".join(table) + "\n")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
