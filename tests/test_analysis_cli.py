"""The `pagetrace` command line, figures, exports, merge and diff."""
import json
import os
import subprocess
import sys

import numpy as np
import pyarrow.parquet as pq
import pytest
from matplotlib.container import ErrorbarContainer

from pagetrace import (cli, export, merge, metrics, model, plots, read_trace,
                       startup, synth)
from pagetrace.formats import read_plan, read_startup_runs

pytestmark = pytest.mark.unit   # needs no root (conftest.py)

SAMPLES = os.path.join(os.path.dirname(__file__), "..", "samples")


def sample(name):
    return os.path.join(SAMPLES, name)


def run_cli(capsys, *argv):
    code = cli.main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_summary_json(capsys):
    code, out, _ = run_cli(capsys, "summary", "--json", sample("basic.log"))
    assert code == 0
    summary = json.loads(out)
    assert summary["totals"]["pages"] == 10
    assert summary["totals"]["bytes"] == 40960
    assert [f["path"] for f in summary["files"]] == [
        "/usr/lib/libfoo.so", "/usr/lib/libbar.so", "/usr/share/app/data.bin"]
    assert [f["pages"] for f in summary["files"]] == [5, 3, 2]
    assert summary["requests"] == 7 and summary["seeks"] == 6


def test_summary_text_and_malformed_warnings(capsys):
    code, out, err = run_cli(capsys, "summary", sample("malformed.log"))
    assert code == 0
    # 12,288 bytes in 8 µs.
    assert "total: 3 pages, 12,288 bytes, 2 files in 0.008 ms (1,464.8 MiB/s)" in out
    # One line per malformed line on stderr, then the lost events.
    lines = err.splitlines()
    assert [line.split(":")[2] for line in lines[:6]] == [
        "4", "5", "6", "7", "8", "10"]
    assert lines[6].endswith("the tracer lost 2 events; the trace is "
                             "incomplete")


def test_unknown_version_fails_cleanly(capsys):
    code, _, err = run_cli(capsys, "summary", sample("unknown-version.log"))
    assert code == 1
    assert err == (f"pagetrace: {sample('unknown-version.log')}: unsupported "
                   "trace format version '3' (this reader knows 1, 2)\n")


def test_console_script_is_installed():
    script = os.path.join(os.path.dirname(sys.executable), "pagetrace")
    result = subprocess.run([script, "summary", "--json", sample("basic.log")],
                            capture_output=True, text=True, check=True)
    assert json.loads(result.stdout)["totals"]["files"] == 3


def test_seeks_json_with_plan(capsys):
    code, out, _ = run_cli(capsys, "seeks", "--json", sample("basic.log"),
                           "--plan", sample("plan.csv"))
    assert code == 0
    rows = {(r["space"], r["order"]): r for r in json.loads(out)}
    assert rows[("physical (plan)", "original")]["seeks"] == 5
    assert rows[("physical (plan)", "sorted")]["requests"] == 6
    assert rows[("file offsets", "sorted")]["seek distance (bytes)"] == 569344


def test_offset_time_plot_data(basic_frame):
    fig = plots.plot_offset_time(basic_frame)
    ax = fig.axes[0]
    points = np.vstack([c.get_offsets() for c in ax.collections])
    assert len(points) == 10
    # x: ms since the first read; y: offset in MiB.
    assert sorted(points[:, 0].tolist()) == pytest.approx(
        [0, 0.01, 0.02, 0.1, 0.11, 0.2, 0.3, 0.31, 0.4, 0.5])
    assert points[:, 1].max() == pytest.approx(528384 / 2**20)
    # One colour (one scatter) per file.
    assert [c.get_label() for c in ax.collections] == [
        "/usr/lib/libfoo.so", "/usr/lib/libbar.so", "/usr/share/app/data.bin"]


def test_zoom_shows_the_densest_window(basic_frame):
    # Times (ms): 0 .01 .02 .1 .11 .2 .3 .31 .4 .5; a window of 10% (0.05 ms)
    # holds at most 3 reads, first from 0 to 0.05.
    assert plots.densest_window([0, .01, .02, .1, .11, .2, .3, .31, .4, .5],
                                0.1) == pytest.approx((0.0, 0.05))
    fig = plots.plot_offset_time(basic_frame, zoom=True)
    ax = fig.axes[0]
    assert ax.get_xlim() == pytest.approx((0.0, 0.05))
    # Offsets read in the window: 0, 4096, 8192 bytes of libfoo, with a
    # margin of one page either side.
    page = 4096 / 2**20
    assert ax.get_ylim() == pytest.approx((-page, 8192 / 2**20 + page))
    # Only libfoo is read in the window, so only it is in the legend.
    assert [t.get_text() for t in ax.get_legend().get_texts()] == [
        "/usr/lib/libfoo.so"]


def test_plan_plot_original_against_sorted(basic_frame):
    fig = plots.plot_plan_physical(read_plan(sample("plan.csv")))
    left, right = fig.axes
    original = left.lines[0].get_ydata() * 2**20
    on_disk = right.lines[0].get_ydata() * 2**20
    # The six requests with a physical offset, in plan order...
    assert original.tolist() == [104857600, 11010048, 104923136, 209715200,
                                 10485760, 104869888]
    # ...and in disk order, with libfoo 0 and 12288 merged into one.
    assert on_disk.tolist() == [10485760, 11010048, 104857600, 104923136,
                                209715200]
    assert list(np.diff(on_disk) > 0) == [True] * 4
    # Sorted ends earlier on the modelled time axis.
    assert right.lines[0].get_xdata()[-1] < left.lines[0].get_xdata()[-1]


def test_startup_table_ci_by_hand():
    table = startup.startup_table(read_startup_runs(sample("startup-runs.csv")))
    assert table.index.tolist() == ["cold", "selective", "hot", "prefetched",
                                    "simulated"]
    cold = table.loc["cold"]
    # 1.70, 1.75, 1.80: mean 1.75, s = 0.05, t(0.975, 2) = 4.302653.
    half = 4.302653 * 0.05 / np.sqrt(3)
    assert cold["elapsed_s_mean"] == pytest.approx(1.75)
    assert cold["elapsed_s_low"] == pytest.approx(1.75 - half, abs=1e-6)
    assert cold["elapsed_s_high"] == pytest.approx(1.75 + half, abs=1e-6)
    # Failed and timed-out runs do not count.
    assert table.loc["selective", "runs"] == 2
    assert table.loc["selective", "failed"] == 1
    assert table.loc["prefetched", "total_s_mean"] == pytest.approx(1.12)
    # A single run has no interval.
    assert np.isnan(table.loc["simulated", "total_s_low"])


def test_startup_chart_data(capsys, tmp_path):
    stem = str(tmp_path / "startup")
    code, out, _ = run_cli(capsys, "startup", sample("startup-runs.csv"),
                           "-o", stem)
    assert code == 0
    assert "1,750.00 ms ± 7.10%" in out
    assert os.path.getsize(stem + ".png") > 0
    assert os.path.getsize(stem + ".svg") > 0
    table = startup.startup_table(read_startup_runs(sample("startup-runs.csv")))
    fig = plots.plot_startup(table)
    ax = fig.axes[0]
    heights = [bar.get_height() for bar in ax.patches]
    assert heights == pytest.approx([1750, 1510, 870, 1120, 1600])
    # Error bar of the first bar spans the CI (ms).
    errorbar = [c for c in ax.containers
                if isinstance(c, ErrorbarContainer)][0]
    segments = errorbar.lines[2][0].get_segments()
    assert segments[0][:, 1] == pytest.approx(
        [table.loc["cold", "total_s_low"] * 1e3,
         table.loc["cold", "total_s_high"] * 1e3])


def test_plot_command_writes_png_and_svg(capsys, tmp_path):
    stem = str(tmp_path / "basic")
    code, out, _ = run_cli(capsys, "plot", sample("basic.log"), "--zoom",
                           "--plan", sample("plan.csv"), "-o", stem)
    assert code == 0
    written = out.split()
    assert written == [stem + s for s in (".png", ".svg", "-zoom.png",
                                          "-zoom.svg", "-plan.png",
                                          "-plan.svg")]
    with open(stem + ".png", "rb") as png:
        assert png.read(8) == b"\x89PNG\r\n\x1a\n"
    with open(stem + ".svg") as svg:
        assert "<svg" in svg.read(500)


@pytest.fixture
def basic_frame():
    return read_trace(sample("basic.log"))


@pytest.fixture
def real_files_trace(tmp_path):
    """A trace of two real files, so that fio can open them."""
    data = tmp_path / "data"
    data.mkdir()
    (data / "f1").write_bytes(os.urandom(200_000))
    (data / "f2").write_bytes(os.urandom(100_000))
    trace = tmp_path / "t.log"
    trace.write_text(
        "# pagetrace-format: 1\n"
        f"1000 {data}/f1 0\n1010 {data}/f1 4096\n1020 {data}/f2 8192\n"
        f"1030 {data}/f1 65536\n1040 //deleted/gone 0\n")
    return trace, data


def test_export_fio_iolog(capsys, tmp_path, real_files_trace):
    trace, data = real_files_trace
    iolog = tmp_path / "t.iolog"
    code, _, err = run_cli(capsys, "export", str(trace), "--fio", str(iolog))
    assert code == 0
    assert "1 requests skipped" in err
    assert iolog.read_text().splitlines() == [
        "fio version 3 iolog",
        f"0 {data}/f1 add", f"0 {data}/f2 add",
        f"0 {data}/f1 open", f"0 {data}/f2 open",
        f"0 {data}/f1 read 0 8192",
        f"20 {data}/f2 read 8192 4096",
        f"30 {data}/f1 read 65536 4096",
        f"30 {data}/f1 close", f"30 {data}/f2 close"]


def test_fio_reads_the_iolog_back(capsys, tmp_path, real_files_trace):
    trace, _ = real_files_trace
    iolog = tmp_path / "t.iolog"
    run_cli(capsys, "export", str(trace), "--fio", str(iolog))
    result = subprocess.run(
        ["fio", "--name=replay", f"--read_iolog={iolog}", "--ioengine=null",
         "--output-format=json"], capture_output=True, text=True, check=True,
        cwd=tmp_path)
    read = json.loads(result.stdout)["jobs"][0]["read"]
    assert read["total_ios"] == 3
    assert read["io_bytes"] == 8192 + 4096 + 4096


CSV_HEADER = "timestamp_us,path,offset,kind,pid,tid,comm,cause,dev,ino"


def export_csv_and_parquet(capsys, tmp_path, trace):
    """`pagetrace export TRACE --csv --parquet`: the CSV's lines (its header
    checked) and the Parquet table."""
    csv_path, parquet_path = tmp_path / "t.csv", tmp_path / "t.parquet"
    code, _, _ = run_cli(capsys, "export", trace, "--csv", str(csv_path),
                         "--parquet", str(parquet_path))
    assert code == 0
    lines = csv_path.read_text().splitlines()
    assert lines[0] == CSV_HEADER
    return lines, pq.read_table(parquet_path)


def test_export_csv_and_parquet(capsys, tmp_path):
    # A version 1 trace has the kind column too, all `read`: one schema
    # for traces of both versions.
    lines, table = export_csv_and_parquet(capsys, tmp_path, sample("escaped.log"))
    assert lines[1] == ("1763784000000000,/mnt/img/a\\040b\\012c,0,read,100,"
                        "100,weird\\040app,sync_ra,7:0,12")
    assert len(lines) == 9
    assert table.num_rows == 8
    assert table.column("kind").to_pylist() == ["read"] * 8
    assert table.column("offset").to_pylist()[4] == 12288
    assert table.column("path").to_pylist()[2] == "/mnt/img/back\\134slash"


def _trace(tmp_path, name, rows):
    path = tmp_path / name
    path.write_text("".join(f"{t} {p} {o}\n" for t, p, o in rows))
    return read_trace(path)


def test_merge_keeps_earliest_relative_time_and_counts_runs(tmp_path):
    a = _trace(tmp_path, "a.log", [(1000, "/x", 0), (1010, "/x", 4096),
                                   (1050, "/y", 0)])
    b = _trace(tmp_path, "b.log", [(5000, "/y", 0), (5003, "/x", 4096),
                                   (5040, "/z", 8192)])
    merged = merge.merge_traces([a, b])
    assert list(zip(merged["ts_us"], merged["path"].astype(str),
                    merged["offset"], merged["runs"])) == [
        (0, "/x", 0, 1), (0, "/y", 0, 2), (3, "/x", 4096, 2),
        (40, "/z", 8192, 1)]
    table = merge.stability(merged)
    assert table["pages"].tolist() == [2, 2]
    assert table["share"].tolist() == [0.5, 0.5]


def test_merge_command_writes_a_trace(capsys, tmp_path):
    a = tmp_path / "a.log"
    a.write_text("1000 /x 0\n1010 /x\\040y 4096\n")
    out = tmp_path / "merged.log"
    code, _, err = run_cli(capsys, "merge", str(a), sample("basic.log"),
                           "-o", str(out))
    assert code == 0
    merged = read_trace(out)
    assert merged.attrs["columns"][3:] == ["runs"]
    # The command header is escaped on writing and unescaped on reading.
    assert merged.attrs["header"]["command"] == \
        f"pagetrace merge {a} {sample('basic.log')}"
    assert "\\040" in out.read_text().splitlines()[4]
    assert len(merged) == 12
    assert "/x y" in merged["path"].tolist()
    assert merged["ts_us"].min() == 0


def test_diff(capsys, tmp_path):
    a = _trace(tmp_path, "a.log", [(1, "/x", 0), (2, "/x", 4096),
                                   (3, "/y", 0), (4, "/x", 0)])
    b = _trace(tmp_path, "b.log", [(1, "/x", 4096), (2, "/z", 0)])
    table = merge.diff_traces(a, b)
    assert table.loc["/x"].tolist() == [1, 0, 1]
    assert table.loc["/y"].tolist() == [1, 0, 0]
    assert table.loc["/z"].tolist() == [0, 1, 0]
    code, out, _ = run_cli(capsys, "diff", str(tmp_path / "a.log"),
                           str(tmp_path / "b.log"))
    assert code == 0
    assert out.splitlines()[-1].split() == ["total", "2", "1", "1"]


# --- version 2 traces: every consumer of "pages read" counts only the
# `read` records, so samples/used.log gives the numbers of its read
# records alone (the same file without its access and map lines).

@pytest.fixture
def used_and_reads(tmp_path):
    reads = tmp_path / "used-reads.log"
    with open(sample("used.log")) as full:
        reads.write_text("".join(
            line for line in full
            if line.startswith("#") or line.split()[3] == "read"))
    return read_trace(sample("used.log")), read_trace(reads), str(reads)


def test_v2_summary_counts_reads_only(capsys, used_and_reads):
    _, _, reads_path = used_and_reads
    code, out, _ = run_cli(capsys, "summary", "--json", sample("used.log"))
    assert code == 0
    full = json.loads(out)
    _, out, _ = run_cli(capsys, "summary", "--json", reads_path)
    alone = json.loads(out)
    for key in ("totals", "files", "requests", "seeks"):
        assert full[key] == alone[key]
    # By hand: libfoo 0-12288 (4 pages) and my file 0-8192 (3 pages), each
    # one request; the second is a seek (another file).
    assert full["totals"]["pages"] == 7 and full["totals"]["files"] == 2
    assert full["totals"]["bytes"] == 28672
    assert full["totals"]["duration_us"] == 100
    assert [f["pages"] for f in full["files"]] == [4, 3]
    assert (full["requests"], full["seeks"]) == (2, 1)


def test_v2_seeks_and_model_count_reads_only(capsys, used_and_reads):
    full, alone, reads_path = used_and_reads
    assert metrics.trace_seek_report(full) == metrics.trace_seek_report(alone)
    assert model.predict_trace(full) == model.predict_trace(alone)
    requests = metrics.group_requests(full)
    assert list(zip(requests["path"].astype(str), requests["offset"],
                    requests["length"])) == [
        ("/usr/lib/libfoo.so", 0, 16384), ("/data/my file", 0, 12288)]
    assert metrics.per_file(full).equals(metrics.per_file(alone))
    plan = synth.contiguous_layout_plan(requests)
    assert plan.equals(synth.contiguous_layout_plan(
        metrics.group_requests(alone)))
    _, out_full, _ = run_cli(capsys, "seeks", "--json", sample("used.log"))
    _, out_alone, _ = run_cli(capsys, "seeks", "--json", reads_path)
    assert json.loads(out_full) == json.loads(out_alone)


def test_v2_merge_and_diff_count_reads_only(capsys, tmp_path, used_and_reads):
    full, alone, reads_path = used_and_reads
    merged = merge.merge_traces([full, full])
    assert merged.equals(merge.merge_traces([alone, alone]))
    assert len(merged) == 7 and merged["runs"].tolist() == [2] * 7
    # /etc/cached.conf was only accessed: no page of it is in the diff.
    table = merge.diff_traces(full, alone)
    assert table.index.tolist() == ["/usr/lib/libfoo.so", "/data/my file"]
    assert table["both"].tolist() == [4, 3]
    assert table[["only_a", "only_b"]].to_numpy().sum() == 0
    out = tmp_path / "merged.log"
    code, _, _ = run_cli(capsys, "merge", sample("used.log"), "-o", str(out))
    assert code == 0
    # The union of reads is a version 1 trace again.
    assert out.read_text().startswith("# pagetrace-format: 1\n")
    assert len(read_trace(out)) == 7


def test_v2_fio_export_counts_reads_only(capsys, tmp_path, used_and_reads):
    _, _, reads_path = used_and_reads
    iolog_full, iolog_alone = tmp_path / "full.iolog", tmp_path / "alone.iolog"
    run_cli(capsys, "export", sample("used.log"), "--fio", str(iolog_full))
    run_cli(capsys, "export", reads_path, "--fio", str(iolog_alone))
    assert iolog_full.read_text() == iolog_alone.read_text()
    # "/data/my file" has a space, which fio cannot name: one request left.
    assert "0 /usr/lib/libfoo.so read 0 16384" in iolog_full.read_text()


def test_v2_csv_and_parquet_keep_every_record_and_kind(capsys, tmp_path):
    lines, table = export_csv_and_parquet(capsys, tmp_path, sample("used.log"))
    # 13 records: 7 read, 4 access, 2 map.
    kinds = [line.split(",")[3] for line in lines[1:]]
    assert (kinds.count("read"), kinds.count("access"),
            kinds.count("map")) == (7, 4, 2)
    assert lines[12] == ("1763784000000130,/etc/cached.conf,0,access,100,"
                         "100,app,read,254:1,14")
    assert table.column_names[:4] == ["ts_us", "path", "offset", "kind"]
    assert table.column("kind").to_pylist() == kinds


def test_v2_trace_written_back_reads_the_same(tmp_path, used_and_reads):
    full, _, _ = used_and_reads
    out = tmp_path / "again.log"
    with open(out, "w", encoding="utf-8") as stream:
        export.write_trace(full, stream)
    text = out.read_text().splitlines()
    assert text[:5] == [
        "# pagetrace-format: 2", "# page-size: 4096", "# clock: realtime-us",
        "# columns: timestamp_us path offset kind pid tid comm cause dev ino",
        "# records: read access map"]
    # The trailer counts reads, plus the access and map records.
    assert text[-1] == ("# end: pages=7 bytes=28672 files=2 duration_us=200 "
                        "lost=0 accessed=4 mapped=2")
    again = read_trace(out)
    assert again.astype(str).equals(full.astype(str))


# Every state startup-bench knows, in its order: the most a chart shows.
STATES = list(startup.STARTUP_STATES)


def _runs_csv(path, states):
    rows = ["run,state,iteration,status,elapsed_s,prefetch_s,total_s,"
            "cold_fraction"]
    for i in range(2):
        for j, state in enumerate(states):
            t = 0.05 + 0.01 * j + 0.002 * i
            rows.append(f"{len(rows) - 1},{state},{i},ok,{t},,{t},")
    path.write_text("\n".join(rows) + "\n")
    return str(path)


@pytest.mark.parametrize("n", [1, 3, 7, 11])
def test_startup_chart_labels_never_overlap(tmp_path, n):
    # The demo's seven states once drew "prefetched-used" over
    # "concurrent": at any number of states, the labels' boxes, as the
    # renderer lays them out in the PNG written, do not intersect.
    table = startup.startup_table(read_startup_runs(
        _runs_csv(tmp_path / "runs.csv", STATES[:n])))
    for fig in (plots.plot_startup(table),
                plots.plot_startup_pair([table, table], ["a", "b"])):
        png = tmp_path / "startup.png"
        fig.savefig(png, dpi=110)
        assert png.stat().st_size > 0
        fig.set_dpi(110)
        ax = fig.axes[0]
        boxes = plots.label_boxes(fig, ax)
        assert [t.get_text() for t in ax.get_xticklabels()] == STATES[:n]
        assert len(boxes) == n
        assert not plots.boxes_overlap(boxes), [
            (t.get_text(), b) for t, b in zip(ax.get_xticklabels(), boxes)]
        # Inside the picture, not cut off at its edges.
        width, height = fig.canvas.get_width_height()
        assert all(b.x0 >= 0 and b.x1 <= width and b.y0 >= 0
                   for b in boxes)
