"""README command 1, end to end: scripts/demo on the built-in sample.

The demo traces a cold start of samples/startup-app, replays it, times it
in every cache state and writes the report. The workload's accesses are
fixed, so the report's numbers can be checked against the trace and the
workload's own list of pages.
"""
import csv
import json
import os
import re
import subprocess

from conftest import REPO, require_root
from trace_oracle import Trace

APP = os.path.join(REPO, "samples", ".output", "startup-app")


def test_demo_runs_the_whole_loop(tmp_path):
    require_root()
    out = tmp_path / "demo"
    proc = subprocess.run([os.path.join(REPO, "scripts", "demo"), "--no-install",
                           "-n", "2", "-o", str(out)],
                          capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert f"report: {out}/report/index.html" in proc.stdout
    # What a person reads: a file replay may not open is said once, as not
    # readable (never io_error), and no figure runs past 10 digits (bytes
    # in KiB/MiB/GiB, not 2261777446577).
    said = proc.stdout + proc.stderr
    assert "io_error" not in said
    assert len(re.findall(r"not readable", said)) <= 1
    assert not re.search(r"(?<![\w/.-])\d{11,}(?![\w/.-])", said), said

    # The trace holds every page the workload asks for (readahead may add more).
    trace = Trace((out / "reads.log").read_text(errors="surrogateescape"))
    # The demo records with --used: the reads are the trace's read records.
    assert trace.header["pagetrace-format"] == "2"
    pages = {(path, offset) for _, path, offset, _ in trace.read_records}
    listed = subprocess.run([APP, "--list-pages", "--work", "0", str(out / "app-data")],
                            capture_output=True, text=True, check=True).stdout
    wanted = {(path, offset) for _, path, offset, _ in Trace(listed).records}
    assert wanted and wanted <= pages
    assert trace.trailer["lost"] == "0" and int(trace.trailer["pages"]) == len(pages)
    # Metadata reads (cause, field 8 with -x) are the filesystem's: the
    # report and waste count files and file pages without them.
    file_pages = {(p, o) for _, p, o, extra in trace.read_records if extra[4] != "metadata"}
    files = {p for p, _ in file_pages}
    assert len([f for f in files if "/app-data/" in f]) == 40
    # The waste line counts the same reads, and every page the workload
    # asked for has an access record, or a map record when fault-around
    # mapped it before the workload touched it (no fault, so no access).
    assert f"read {len(file_pages):,} pages" in proc.stdout
    # Including the batches filemap_get_pages() returns without its
    # tracepoint (docs/tracer.md, "A read batch that ends on a page still
    # being read"): before the read calls' start was seen, 2 runs in 20 of
    # this workload lost 1 of its 381 pages.
    touched = {(p, o) for _, p, o, extra in trace.records if extra[0] in ("access", "map")}
    assert wanted - touched == set(), sorted(wanted - touched)

    # Replays of the same reads: same bytes in both orders, sorted has no more seeks.
    original = json.load(open(out / "replay-original.json"))
    ordered = json.load(open(out / "replay-sorted.json"))
    assert original["order"] == "original" and ordered["order"] == "sorted"
    # Metadata pages replay on the device node, which a sandbox may not let
    # anyone open (here: /dev/vda, EPERM): replay says so and counts them as
    # skipped (not_readable, never io_error); file pages all replay.
    metadata = len(pages) - len(file_pages)
    for run in (original, ordered):
        assert run["skipped"]["io_error"] == 0
        assert run["skipped"]["not_readable"] <= metadata
        assert run["pages"] + run["skipped"]["not_readable"] == len(pages)
    assert ordered["seeks"] <= original["seeks"]

    # Every start-up ran, in every state.
    runs = list(csv.DictReader(open(out / "runs.csv")))
    states = {r["state"] for r in runs}
    assert {"cold", "selective", "hot", "prefetched", "simulated"} <= states
    assert len(runs) == 2 * len(states)
    assert {r["status"] for r in runs} == {"ok"}

    # The report: all sections, the trace's own totals, figures embedded.
    md = (out / "report" / "report.md").read_text()
    for section in ("## Totals", "## Seeks and modelled time", "## Replay runs",
                    "## Start-up time per cache state", "## Reads over time"):
        assert section in md
    totals = re.search(r"\| pages \| bytes \| files .*\n.*\n\| ([\d,]+) \| ([\d,]+) \| (\d+) \|", md)
    assert int(totals[1].replace(",", "")) == len(pages)
    assert int(totals[2].replace(",", "")) == len(pages) * 4096
    assert int(totals[3]) == len(files)
    # Findings come first and state the trace's own numbers.
    assert md.index("## Findings") < md.index("## Totals")
    assert f"({len(pages):,} pages) from {len(files)} files" in md
    assert "- **I/O cost**: " in md and "- **simulated**: " in md
    html = (out / "report" / "index.html").read_text()
    assert html.count("data:image/png;base64,") >= 3

