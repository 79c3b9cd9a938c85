"""Plain-text, Markdown and HTML tables of rows: the one place where a
number becomes a table cell (thousands separated, three decimals below
1,000, `n/a` for NaN). Standard library only."""
import html
import math


class Bytes(int):
    """A byte count: an int everywhere (JSON, arithmetic), shown in a
    table in KiB, MiB or GiB, as replay's summary shows it."""


def human_bytes(n):
    """N bytes for a person: '512 bytes', '48.4 KiB', '1842.1 GiB' (powers
    of 1024, at most GiB, as lib/size.c format_bytes)."""
    if n < 1024:
        return f"{n} bytes"
    value = n / 1024
    for unit in ("KiB", "MiB"):
        if value < 1024:
            return f"{value:.1f} {unit}"
        value /= 1024
    return f"{value:.1f} GiB"


def _cell(value):
    if isinstance(value, Bytes):
        return human_bytes(int(value))
    if isinstance(value, float):
        if math.isnan(value):
            return "n/a"
        return f"{value:,.3f}" if abs(value) < 1000 else f"{value:,.0f}"
    if isinstance(value, int):
        return f"{value:,}"
    return str(value)


def markdown_table(header, rows):
    """A GitHub-flavoured Markdown table; `|` in cells is escaped."""
    def line(cells):
        return "| " + " | ".join(_cell(c).replace("|", "\\|")
                                 for c in cells) + " |"
    out = [line(header), "| " + " | ".join("---" for _ in header) + " |"]
    out += [line(r) for r in rows]
    return "\n".join(out) + "\n"


def html_table(header, rows):
    head = "".join(f"<th>{html.escape(str(h))}</th>" for h in header)
    body = "".join("<tr>" + "".join(f"<td>{html.escape(_cell(c))}</td>"
                                    for c in r) + "</tr>" for r in rows)
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def text_table(header, rows):
    """Aligned plain-text table for the terminal."""
    cells = [[str(h) for h in header]] + [[_cell(c) for c in r] for r in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(header))]
    lines = ["  ".join(c.ljust(w) if i == 0 else c.rjust(w)
                       for i, (c, w) in enumerate(zip(r, widths)))
             for r in cells]
    return "\n".join(lines) + "\n"
