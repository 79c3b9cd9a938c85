"""The report (findings first, relative times, waterfall, appendix) and
`pagetrace compare`, on hand-made inputs whose every number is worked out
in the comments. The page in a real browser: test_analysis_report_browser.py.

t quantiles used below (two-sided 95%, from any t table):
t(0.975, 2) = 4.302653, t(0.975, 4) = 2.776445.
"""
import csv
import json
import math
import re

import numpy as np
import pytest

from pagetrace import cli, plots, read_trace, report
from pagetrace.analysis import findings
from test_analysis_cli import run_cli, sample

pytestmark = pytest.mark.unit   # needs no root (conftest.py)

T2 = 4.302653  # t(0.975, 2); t(0.975, 4) = 2.776445 appears in the numbers


def write_runs(path, states):
    """A startup-bench runs CSV: {state: [total_s, ...]}, all ok, no
    prefetch time (total = elapsed)."""
    lines = ["run,state,iteration,status,elapsed_s,prefetch_s,total_s,"
             "cold_fraction"]
    run = 0
    for state, totals in states.items():
        for iteration, total in enumerate(totals):
            lines.append(f"{run},{state},{iteration},ok,{total},,{total},")
            run += 1
    path.write_text("\n".join(lines) + "\n")
    return str(path)


def write_replay(path, order, elapsed_s, grouped=True):
    path.write_text(json.dumps({
        "tool": "replay", "format": 1, "trace": "t.log", "order": order,
        "mode": "direct", "grouped": grouped, "max_request_bytes": 1048576,
        "queue_depth": 1, "requests": 7, "pages": 10, "bytes": 40960,
        "files": 3, "elapsed_s": elapsed_s, "mib_per_s": 1.0, "seeks": 5}))
    return str(path)


# Start-ups of run A. Each state has 3 runs spaced 0.1 s apart: variance
# 0.01, so for two such states the difference's standard error is
# sqrt(0.01/3 + 0.01/3) = 0.0816497 with df = 4 (Welch, equal variances):
# half-width 2.776445 × 0.0816497 = 0.226697 s.
RUNS_A = {"cold": [1.3, 1.4, 1.5], "selective": [1.0, 1.1, 1.2],
          "hot": [0.5, 0.6, 0.7], "prefetched": [0.9, 1.0, 1.1],
          "simulated": [1.1, 1.2, 1.3], "prefetched-used": [0.6, 0.7, 0.8],
          "concurrent": [0.7, 0.8, 0.9]}


@pytest.fixture
def inputs(tmp_path):
    runs = write_runs(tmp_path / "runs.csv", RUNS_A)
    replays = [write_replay(tmp_path / "o1.json", "original", 0.20),
               write_replay(tmp_path / "o2.json", "original", 0.22),
               write_replay(tmp_path / "s1.json", "sorted", 0.10),
               write_replay(tmp_path / "s2.json", "sorted", 0.12),
               write_replay(tmp_path / "g.json", "original", 1.0,
                            grouped=False)]
    return runs, replays


def test_difference_ci_is_welch():
    # Equal n and variance: df = 4 (numbers above).
    diff, low, high = findings.difference_ci([1.0, 1.1, 1.2], [0.5, 0.6, 0.7])
    assert diff == pytest.approx(-0.5)
    assert (low, high) == pytest.approx((-0.5 - 0.226697, -0.5 + 0.226697),
                                        abs=1e-5)
    # One side without spread: df = n_b - 1 = 2, se = sqrt(1/3).
    diff, low, high = findings.difference_ci([0.0, 0.0, 0.0], [1.0, 2.0, 3.0])
    half = T2 * math.sqrt(1 / 3)
    assert (diff, low, high) == pytest.approx((2.0, 2 - half, 2 + half),
                                              abs=1e-5)
    # One run on a side: no interval.
    diff, low, high = findings.difference_ci([1.0], [2.0, 3.0])
    assert diff == 1.5 and math.isnan(low) and math.isnan(high)


def _findings(tmp_path, inputs, trace="basic.log", plan=True):
    runs, replays = inputs
    out = tmp_path / "report"
    argv = ["report", sample(trace), "--startup", runs, "-o", str(out)]
    if plan:
        argv += ["--plan", sample("plan.csv")]
    for path in replays:
        argv += ["--replay-json", path]
    assert cli.main(argv) == 0
    markdown = (out / "report.md").read_text()
    section = markdown.split("## Findings\n\n")[1].split("\n## ")[0]
    return out, markdown, {line.split("**")[1]: line
                           for line in section.splitlines()}


def test_findings_numbers_match_the_inputs(tmp_path, inputs):
    _, markdown, found = _findings(tmp_path, inputs)
    # basic.log: 10 pages of 4 KiB = 40 KiB; libfoo 5 pages (20 KiB),
    # libbar 3 (12 KiB), data.bin 2 (8 KiB); first read to last: 500 µs.
    assert found["read"] == (
        "- **read**: The start read 40 KiB (10 pages) from 3 files over "
        "0.5 ms; most from libfoo.so 20 KiB, libbar.so 12 KiB, data.bin "
        "8 KiB. *measured; source: trace basic.log: 10 read records; "
        "trailer lost=0*")
    # selective − hot = 1.1 − 0.6 = 0.5 s ± 0.2267 → +273 to +727 ms;
    # 0.5 / 1.1 = 45%.
    assert ("Its I/O cost 500 ms (95% CI +273 to +727 ms), 45% of the "
            "1,100 ms selectively cold start. *measured; source: runs.csv: "
            "selective − hot start-up, 3 and 3 ok runs") in found["I/O cost"]
    # prefetched − selective = 1.0 − 1.1 = −0.1 s ± 0.2267: includes 0.
    # The I/O cost is 0.5 s: prefetched wins back 0.1 of it (20%).
    assert ("1,000 ms in total against 1,100 ms selectively cold; changes it "
            "by −100 ms (95% CI −327 to +127 ms); recovers 20% of the I/O "
            "cost (point estimate; its interval is in startup-bench's "
            "summary). *no measurable difference") in found["prefetched"]
    # prefetched-used − selective = −0.4 ± 0.2267, 0.4 / 0.5 = 80%;
    # concurrent −0.3, 60%.
    assert ("Prefetching only the used pages in disk order, then starting: "
            "700 ms in total against 1,100 ms selectively cold; saves 400 ms "
            "(95% CI −627 to −173 ms); recovers 80% of the I/O cost"
            ) in found["prefetched-used"]
    assert ("first-access order beside the start: 800 ms in total against "
            "1,100 ms selectively cold; saves 300 ms (95% CI −527 to −73.3 ms); "
            "recovers 60% of the I/O cost") in found["concurrent"]
    # simulated − selective = +0.1 s, +9.1% of 1.1 s, interval includes 0.
    assert ("1,200 ms against the real selectively cold start 1,100 ms: "
            "+9.1% "
            "(95% CI −127 to +327 ms); the trace holds the start-up's I/O. "
            "*no measurable difference") in found["simulated"]
    # Sorting: original 0.20, 0.22 (mean 0.21); sorted 0.10, 0.12 (0.11).
    # Variances 0.0002 each, se = sqrt(0.0001 + 0.0001) = 0.0141421, df 2:
    # half 0.0608493; −0.10 → −0.1608 to −0.0392 s. 0.21/0.11 = 1.91×.
    assert ("replay 210 ms → 110 ms, 1.91× (95% CI −161 to −39.2 ms). "
            "*measured; source: replay --json (direct): o1.json, o2.json, "
            "s1.json, s2.json*") in found["sorting"]
    # Grouping: one ungrouped run (1.0 s) against the grouped originals.
    assert ("replay 1,000 ms → 210 ms, 4.76× (no interval). *one run each: "
            "no interval") in found["grouping"]
    # The model's figures are the seek table's (physical plan rows).
    rows = re.findall(r"\| physical \(plan\) \| (original|sorted) \| [^|]+\| "
                      r"[^|]+\| [^|]+\| ([\d.,]+) \|", markdown)
    hdd = dict(rows)
    assert (f"sorting would take the reads from {float(hdd['original']):.1f}"
            f" ms to {float(hdd['sorted']):.1f} ms") in found["HDD model"]
    assert "*model, not measured" in found["HDD model"]
    assert "no access records. *not measured" in found["waste"]


def test_findings_say_undetermined_in_words(tmp_path):
    runs = write_runs(tmp_path / "runs.csv", {"selective": [1.0],
                                              "hot": [0.6, 0.7]})
    _, _, found = _findings(tmp_path, (runs, []), plan=False)
    assert "Its I/O cost 350 ms (no interval)" in found["I/O cost"]
    assert "*undetermined (fewer than two runs)" in found["I/O cost"]
    assert "not measured (give replay --json and replay --sorted --json " \
        "runs)" in found["sorting"]


def test_waste_finding_from_access_records(tmp_path):
    out = tmp_path / "report"
    assert cli.main(["report", sample("used.log"), "-o", str(out)]) == 0
    markdown = (out / "report.md").read_text()
    # samples/used.log (worked out in test_analysis_waste.py): 7 pages
    # read (28 KiB), 4 unused (16 KiB, 57%): libfoo 2, my file 2; 1 mapped.
    assert ("Of the 28 KiB read, 16 KiB (57%) was never accessed, most in "
            "libfoo.so 8 KiB, my\\040file 8 KiB; fault-around mapped 4 KiB "
            "of it") in markdown
    assert "## Used against read, per file" in markdown
    assert (out / "used-vs-read.png").exists()


def test_used_vs_read_and_unused_marks(tmp_path):
    frame = read_trace(sample("used.log"))
    # Unused reads in record order: libfoo 0, 4096 used; 8192, 12288 not;
    # my file 0 used, 4096 and 8192 not.
    assert plots.unused_reads(frame).tolist() == [
        False, False, True, True, False, True, True]
    fig = plots.plot_offset_time(frame, mark_unused=True)
    rings = [c for c in fig.axes[0].collections
             if c.get_label().startswith("read, never accessed")]
    assert len(rings) == 1 and len(rings[0].get_offsets()) == 4
    # All reads drawn, and only reads (7, not the 13 records).
    dots = [c for c in fig.axes[0].collections if c not in rings]
    assert sum(len(c.get_offsets()) for c in dots) == 7
    from pagetrace import waste
    fig = plots.plot_used_vs_read(waste.page_usage(frame))
    widths = [round(p.get_width() * 256) for p in fig.axes[0].patches]
    # In pages (MiB × 256): read 4, 3; used 2, 1; mapped 1, 0.
    assert widths == [4, 3, 2, 1, 1, 0]


def test_report_layout_and_relative_times(tmp_path, inputs):
    out, markdown, _ = _findings(tmp_path, inputs)
    headings = re.findall(r"^## (.+)$", markdown, re.M)
    assert headings[0] == "Findings"
    assert headings[1] == "Which files, when"
    assert headings[-1] == "Appendix: cost model fitted to the replay runs"
    assert headings.index("Totals") > headings.index("Reads over time")
    assert "| hdd | requests: " in markdown.split("## Appendix")[1]
    # Relative ms in the file table and files.csv; no raw timestamp for
    # people to read anywhere in the page.
    assert "| /usr/lib/libbar.so | 3 | 12,288 | 0.100 | 0.310 | 0.210 |" \
        in markdown
    assert "1763784" not in markdown
    page = (out / "index.html").read_text()
    assert "1763784" not in page
    assert page.count("<img") == page.count(
        'src="data:image/png;base64,') == 5
    assert page.index('id="findings"') < page.index("<img")
    with open(out / "files.csv") as f:
        rows = list(csv.reader(f))
    assert rows[0] == ["path", "pages", "bytes", "first (ms)", "last (ms)",
                       "span (ms)"]
    assert rows[2] == ["/usr/lib/libbar.so", "3", "12288", "0.100", "0.310",
                       "0.210"]
    assert "| 10 | 40,960 | 3 | 0.500 |" in markdown
    # 3 runs, sd 0.1: 4.302653 × 0.1 / sqrt(3) = 0.2484 s = 17.74% of 1.4.
    assert "| cold | 3 | 0 | 1,400.00 ms ± 17.74% |" in markdown


def test_summary_shows_relative_times(capsys):
    code, out, _ = run_cli(capsys, "summary", sample("basic.log"))
    assert code == 0
    lines = out.splitlines()
    # 1763784000000000 µs = 2025-11-22 04:00:00 UTC.
    assert lines[0] == ("times: ms since the first read, "
                        "2025-11-22 04:00:00.000 UTC")
    assert lines[2].split() == ["path", "pages", "bytes", "first", "(ms)",
                                "last", "(ms)", "span", "(ms)"]
    assert lines[5].split() == ["/usr/share/app/data.bin", "2", "8,192",
                                "0.300", "0.400", "0.100"]
    assert lines[-1].startswith("total: 10 pages")
    # The machine format keeps raw microseconds.
    _, out, _ = run_cli(capsys, "summary", "--json", sample("basic.log"))
    assert json.loads(out)["files"][0]["first_us"] == 1763784000000000


CAUSED = ("# pagetrace-format: 1\n# page-size: 4096\n"
          "# columns: timestamp_us path offset pid tid comm cause dev ino\n"
          "1000000 /a 0 1 1 app fault 8:1 1\n"
          "1000000 /a 4096 1 1 app fault 8:1 1\n"
          "1002000 /b 0 1 1 app sync_ra 8:1 2\n"
          "1003000 /a 8192 1 1 app read 8:1 1\n"
          "1005000 /c 0 1 1 app forced_ra 8:1 3\n"
          "1006000 /d 0 1 1 app fault 8:1 4\n")


def test_waterfall_rows_and_bars(tmp_path):
    path = tmp_path / "caused.log"
    path.write_text(CAUSED)
    frame = read_trace(str(path))
    rows = plots.waterfall_rows(frame, top=2)
    # /a: 3 pages (12 KiB), 0 to 3 ms, mostly fault; /b, /c, /d 1 page
    # each: the stable sort keeps /b (first read) as the second largest;
    # /c and /d fold into one row from 5 to 6 ms.
    assert rows["path"].tolist() == ["/a", "/b", "2 other files"]
    assert rows["first_ms"].tolist() == [0.0, 2.0, 5.0]
    assert rows["last_ms"].tolist() == [3.0, 2.0, 6.0]
    assert rows["bytes"].tolist() == [12288, 4096, 8192]
    assert rows["cause"].tolist() == ["fault", "sync_ra", "mixed"]
    assert rows["folded"].tolist() == [False, False, True]
    fig = plots.plot_waterfall(frame, top=2)
    ax = fig.axes[0]
    bars = ax.patches[:3]
    assert [b.get_x() for b in bars] == [0.0, 2.0, 5.0]
    # /b read in one instant: a sliver of 0.4% of the 6 ms span.
    assert [b.get_width() for b in bars] == pytest.approx([3.0, 0.024, 1.0])
    colours = [b.get_facecolor()[:3] for b in bars]
    from matplotlib.colors import to_rgb
    assert colours == [to_rgb("tab:blue"), to_rgb("tab:orange"),
                       to_rgb(plots.OTHER_COLOUR)]
    # Thickness grows with bytes: /a (largest) 0.9, the 4 KiB /b
    # 0.25 + 0.65 × sqrt(1/3).
    assert [b.get_height() for b in bars][:2] == pytest.approx(
        [0.9, 0.25 + 0.65 * math.sqrt(1 / 3)])
    assert [t.get_text() for t in ax.get_yticklabels()] == [
        "a  12 KiB", "b  4 KiB", "2 other files  8 KiB"]


def test_plot_waterfall_command(capsys, tmp_path):
    stem = str(tmp_path / "basic")
    code, out, _ = run_cli(capsys, "plot", sample("basic.log"),
                           "--waterfall", "--top", "2", "-o", stem)
    assert code == 0
    assert out.split() == [stem + s for s in (".png", ".svg",
                                              "-waterfall.png",
                                              "-waterfall.svg")]
    with open(stem + "-waterfall.png", "rb") as png:
        assert png.read(8) == b"\x89PNG\r\n\x1a\n"


# --- compare -----------------------------------------------------------

TRACE_A = ("# pagetrace-format: 1\n"
           "5000000 /a 0\n5000000 /a 4096\n5000000 /a 8192\n"
           "5001000 /b 0\n5001000 /b 4096\n5002000 /c 0\n")
TRACE_B = ("# pagetrace-format: 1\n"
           "9000000 /a 0\n9000000 /a 4096\n9000000 /a 8192\n"
           "9000500 /b 0\n9000500 /b 4096\n9000500 /b 8192\n"
           "9000500 /b 12288\n9004000 /d 0\n")


def test_compare(capsys, tmp_path):
    a, b = tmp_path / "a.log", tmp_path / "b.log"
    a.write_text(TRACE_A)
    b.write_text(TRACE_B)
    runs_a = write_runs(tmp_path / "a.csv", RUNS_A)
    # B: cold 0.3 s faster (1.0, 1.1, 1.2 against 1.3, 1.4, 1.5): −300 ms
    # ± 227 → −527 to −73 ms; hot the same values: +0 ± 227.
    runs_b = write_runs(tmp_path / "b.csv", {"cold": [1.0, 1.1, 1.2],
                                             "hot": [0.5, 0.6, 0.7]})
    out = tmp_path / "cmp"
    code, printed, err = run_cli(
        capsys, "compare", str(a), str(b), "--startup-a", runs_a,
        "--startup-b", runs_b, "--label-a", "ra 128", "--label-b", "ra 8192",
        "-o", str(out))
    assert code == 0, err
    assert str(out / "index.html") in printed.split()
    markdown = (out / "report.md").read_text()
    # A: 6 pages = 24 KiB over 2 ms; B: 8 pages = 32 KiB over 4 ms.
    assert ("ra 128 read 24 KiB from 3 files over 2.0 ms; ra 8192 read "
            "32 KiB from 3 files over 4.0 ms: +8 KiB (+33.3%).") in markdown
    # /b grew by 2 pages, /c removed, /d added, /a the same.
    assert ("Files: 1 added (+4 KiB), 1 removed (−4 KiB), 1 grew (+8 KiB); "
            "1 read the same.") in markdown
    assert ("Cold start: 1,400 ms → 1,100 ms; ra 8192 is 300 ms faster "
            "(95% CI −527 to −73.3 ms, −21.4%). *measured") in markdown
    assert ("Hot start: 600 ms → 600 ms; +0.0 ms (95% CI −227 to +227 ms, "
            "+0.0%). *no measurable difference") in markdown
    # The states table: only states both runs have.
    table = re.findall(r"^\| (cold|hot|selective) \|.*$", markdown, re.M)
    assert table == ["cold", "hot"]
    # ± 0.2484 s: 17.74% of 1.4 s, 22.58% of 1.1 s.
    assert ("| cold | 1,400.00 ms ± 17.74% | 1,100.00 ms ± 22.58% | −300 ms "
            "| −527 to −73.3 ms | −21.4% | measured |") in markdown
    with open(out / "files-changed.csv") as f:
        rows = list(csv.reader(f))
    assert rows[1:] == [
        ["/b", "0.008", "0.016", "0.008", "1.000", "0.500", "grew"],
        ["/c", "0.004", "0.000", "-0.004", "2.000", "", "removed"],
        ["/d", "0.000", "0.004", "0.004", "", "4.000", "added"],
        ["/a", "0.012", "0.012", "0.000", "0.000", "0.000", "same"]]
    page = (out / "index.html").read_text()
    assert page.count('src="data:image/png;base64,') == 3


def test_compare_figures_share_axes(tmp_path):
    a, b = tmp_path / "a.log", tmp_path / "b.log"
    a.write_text(TRACE_A)
    b.write_text(TRACE_B)
    frames = (read_trace(str(a)), read_trace(str(b)))
    fig = plots.plot_waterfall_pair(frames, ("A", "B"))
    left, right = fig.axes[:2]
    # Same time axis (0 to 1.02 × the longer run), same rows: /a, /b, /c,
    # /d by first read over both runs (/b first read at 0.5 ms in B).
    assert left.get_xlim() == right.get_xlim() == pytest.approx((0, 4.08))
    assert [t.get_text() for t in left.get_yticklabels()] == [
        "a  12 KiB", "b  16 KiB", "c  4 KiB", "d  4 KiB"]
    # B has no bar on /c's row (2) and A none on /d's (3).
    rows_a = sorted(round(p.get_y() + p.get_height() / 2)
                    for p in left.patches)
    rows_b = sorted(round(p.get_y() + p.get_height() / 2)
                    for p in right.patches)
    assert rows_a == [0, 1, 2] and rows_b == [0, 1, 3]
    fig = plots.plot_offset_time_pair(frames, ("A", "B"))
    assert fig.axes[0].get_shared_x_axes().joined(fig.axes[0], fig.axes[1])
    points = [np.vstack([c.get_offsets() for c in ax.collections])
              for ax in fig.axes[:2]]
    assert [len(p) for p in points] == [6, 8]
    # Time from each run's own first read: B's /d at 4 ms.
    assert points[1][:, 0].max() == pytest.approx(4.0)


def test_compare_states_waste_of_each_run(tmp_path):
    out = tmp_path / "cmp"
    assert cli.main(["compare", sample("basic.log"), sample("used.log"),
                     "-o", str(out)]) == 0
    markdown = (out / "report.md").read_text()
    # basic.log has no access records; used.log's waste as in the report.
    assert "- **waste, basic.log**: What the start read but never used is " \
        "not known" in markdown
    assert "- **waste, used.log**: Of the 28 KiB read, 16 KiB (57%) was " \
        "never accessed" in markdown
    assert "Start-up times not compared: give --startup-a and --startup-b" \
        in markdown


def test_empty_trace_reports_without_warnings(capsys, caplog, tmp_path):
    empty = tmp_path / "empty.log"
    empty.write_text("# pagetrace-format: 1\n")
    out = tmp_path / "report"
    # cli.main prints every warning on stderr; matplotlib also complains
    # through logging (an empty legend).
    for argv in (["report", str(empty), "-o", str(out)],
                 ["plot", str(empty), "--zoom", "--waterfall", "-o",
                  str(tmp_path / "e")],
                 ["compare", str(empty), sample("basic.log"), "-o",
                  str(tmp_path / "cmp")]):
        code, _, err = run_cli(capsys, *argv)
        assert (code, err) == (0, "")
    assert [r.getMessage() for r in caplog.records] == []
    markdown = (out / "report.md").read_text()
    assert "The start read 0 KiB (0 pages) from 0 files" in markdown
    assert "No reads: nothing for order to save." in markdown
