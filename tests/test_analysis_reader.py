"""pagetrace.read_trace and the other readers, against samples/ and the
expected results the C reader is tested against too."""
import json
import os
import warnings

import numpy as np
import pytest

import pagetrace
from pagetrace import expected_json, read_trace
from pagetrace.escape import EscapeError, escape, unescape
from pagetrace.formats import (FormatError, read_plan, read_replay_json,
                               read_startup_runs)
from pagetrace.synth import write_synthetic_trace

SAMPLES = os.path.join(os.path.dirname(__file__), "..", "samples")
TRACE_SAMPLES = ["basic", "escaped", "malformed", "readpage-stp"]


def sample(name):
    return os.path.join(SAMPLES, name)


def expected(name):
    with open(os.path.join(SAMPLES, "expected", name + ".json")) as f:
        return json.load(f)


@pytest.mark.parametrize("engine", ["auto", "python"])
@pytest.mark.parametrize("name", TRACE_SAMPLES)
def test_samples_match_expected(name, engine):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", pagetrace.TraceWarning)
        frame = read_trace(sample(name + ".log"), engine=engine)
    assert expected_json(frame) == expected(name)


def test_fast_engine_handles_plain_samples():
    # The arrow engine must really run on ordinary traces, not always give
    # way to the python one.
    assert read_trace(sample("basic.log")).attrs["engine"] == "arrow"
    assert read_trace(sample("readpage-stp.log")).attrs["engine"] == "arrow"


def test_frame_columns_and_types():
    frame = read_trace(sample("escaped.log"))
    assert list(frame.columns) == ["ts_us", "path", "offset", "kind", "pid",
                                   "tid", "comm", "cause", "dev", "ino"]
    assert frame["path"].dtype.name == "category"
    # Version 1: every record is a page read from storage.
    assert frame["kind"].dtype.name == "category"
    assert list(frame["kind"].cat.categories) == ["read", "access", "map"]
    assert set(frame["kind"]) == {"read"}
    assert frame["ts_us"].dtype == np.int64
    assert frame["offset"].dtype == np.int64
    # Categories in order of first appearance.
    assert list(frame["path"].cat.categories[:2]) == ["/mnt/img/a b\nc",
                                                      "/mnt/img/tab\tname"]


def test_unknown_version_is_rejected_with_its_number():
    with pytest.raises(pagetrace.UnsupportedVersionError) as err:
        read_trace(sample("unknown-version.log"))
    assert err.value.version == (expected("unknown-version")
                                    ["unsupported_version"])
    assert "unsupported trace format version '3' (this reader knows 1, 2)" \
        in str(err.value)
    assert "unknown-version.log" in str(err.value)


def test_malformed_lines_warn_with_file_and_line():
    with pytest.warns(pagetrace.TraceWarning) as caught:
        frame = read_trace(sample("malformed.log"))
    messages = [str(w.message) for w in caught]
    assert any(m.endswith("malformed.log:5: offset 4097 is not a multiple "
                          "of page-size 4096") for m in messages)
    assert any("lost 2 events" in m for m in messages)
    assert len(frame) == 3


def test_strict_mode_stops_at_first_malformed_line():
    with pytest.raises(pagetrace.MalformedTraceError) as err:
        read_trace(sample("malformed.log"), strict=True)
    assert err.value.line == 4


def _engines_agree(tmp_path, text):
    path = tmp_path / "t.log"
    path.write_bytes(text)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", pagetrace.TraceWarning)
        fast = read_trace(path)
        slow = read_trace(path, engine="python")
    assert expected_json(fast) == expected_json(slow)
    return fast


def test_engines_agree_on_mid_file_comments_blank_lines_and_tabs(tmp_path):
    fast = _engines_agree(tmp_path, (
        b"# pagetrace-format: 1\n"
        b"1 /a 0\n"
        b"# a comment\n"
        b"\n"
        b"2\t/b\\040c 4096\n"
        b"3 /a 4097\n"          # unaligned: line 6
        b"4 /x\\9 0\n"          # bad escape: line 7
        b"5 /a 0x10\n"          # hex is not decimal: line 8
        b"6 /a 1.0\n"           # nor is a float: line 9
        b"7 /d#e 8192\n"))
    assert fast.attrs["engine"] == "arrow"
    assert [line for line, _ in fast.attrs["malformed"]] == [6, 7, 8, 9]
    assert fast["path"].tolist() == ["/a", "/b c", "/d#e"]


def test_empty_lines_alone_keep_the_fast_engine(tmp_path):
    fast = _engines_agree(tmp_path, b"1 /a 0\n\n2 /b 4096\n\n\n3 /c 0\n")
    assert fast.attrs["engine"] == "arrow"
    assert fast["ts_us"].tolist() == [1, 2, 3]


def test_engines_agree_on_big_numbers_and_invalid_utf8(tmp_path):
    fast = _engines_agree(tmp_path, (
        b"9223372036854775807 /a 0\n"    # int64 max: valid, 19 digits
        b"18446744073709551615 /a 0\n"   # uint64 max: valid, 20 digits
        b"18446744073709551616 /a 0\n"   # one more: out of range
        b"5 /caf\xe9 4096\n"))            # latin-1 byte, not UTF-8
    assert fast["ts_us"].tolist() == [9223372036854775807, 2**64 - 1, 5]
    assert fast["ts_us"].dtype == np.uint64
    assert fast.attrs["malformed"] == [
        (3, "timestamp does not fit in 64 bits")]
    assert fast["path"].tolist()[2].encode("utf-8", "surrogateescape") == \
        b"/caf\xe9"


def test_header_only_and_empty_files(tmp_path):
    path = tmp_path / "empty.log"
    path.write_bytes(b"")
    for engine in ("auto", "python"):
        with pytest.raises(pagetrace.TraceError, match="empty.log: empty file$"):
            read_trace(path, engine=engine)
    header_only = _engines_agree(
        tmp_path, b"# pagetrace-format: 1\n# page-size: 16384\n")
    assert len(header_only) == 0 and header_only.attrs["page_size"] == 16384


def test_escape_round_trip():
    name = "/a b\tc\nd\\e\x7f\udce9é"
    # Bytes that are not valid UTF-8 are written as they are (the spec
    # escapes only white space, control bytes and the backslash).
    assert escape(name) == "/a\\040b\\011c\\012d\\134e\\177\udce9é"
    assert unescape(escape(name)) == name
    with pytest.raises(EscapeError):
        unescape("/bad\\9")


def test_synthetic_trace_reads_back(tmp_path):
    # 200k records through the fast path; the 10M figure is in
    # bench/bench_analysis.py.
    path = tmp_path / "synthetic.log"
    write_synthetic_trace(path, 200_000, seed=3)
    frame = read_trace(path)
    assert frame.attrs["engine"] == "arrow"
    assert len(frame) == 200_000
    assert frame.attrs["trailer"]["pages"] == 200_000
    assert (frame["offset"] % 4096 == 0).all()
    assert frame["ts_us"].is_monotonic_increasing


def test_read_plan():
    plan = read_plan(sample("plan.csv"))
    assert len(plan) == 7
    assert plan["length"].sum() == 40960
    assert plan["physical_offset"].isna().tolist() == [False] * 5 + [True,
                                                                    False]
    assert plan.loc[1, "physical_offset"] == 11010048


def test_read_plan_with_comma_and_escape_in_path(tmp_path):
    path = tmp_path / "plan.csv"
    path.write_text("order,path,offset,length,dev,physical_offset\n"
                    "0,/a\\040b,c,4096,8192,8:1,\n")
    plan = read_plan(path)
    assert plan.loc[0, "path"] == "/a b,c"
    assert plan.loc[0, "offset"] == 4096


def test_read_plan_rejects_wrong_header(tmp_path):
    path = tmp_path / "plan.csv"
    path.write_text("order,path,offset\n")
    with pytest.raises(FormatError):
        read_plan(path)


def test_read_replay_json():
    run = read_replay_json(sample("replay-original.json"))
    assert run["requests"] == 7 and run["seeks"] == 5
    assert run["elapsed_s"] == 0.0712


def test_read_startup_runs():
    runs = read_startup_runs(sample("startup-runs.csv"))
    assert len(runs) == 13
    assert runs["prefetch_s"].isna().sum() == 9
    assert runs.loc[3, "total_s"] == 1.10
    assert list(runs["status"].unique()) == ["ok", "failed", "timeout"]


def test_chunked_reading_confines_the_python_engine(tmp_path, monkeypatch):
    # A file the arrow engine cannot take whole (a run of spaces, a row
    # with an extra field): with small chunks, only the chunks holding them
    # go to the python engine, and the result is the same.
    from pagetrace import trace as trace_module
    lines = [f"{1000 + i} /f{i % 3} {4096 * i}" for i in range(40)]
    lines[7] = "1007  /f1   28672"
    lines[30] = "1030 /f0 122880 extra"
    lines[33] = "1033 /f0 4097"
    path = tmp_path / "t.log"
    path.write_text("# pagetrace-format: 1\n" + "\n".join(lines) + "\n")
    monkeypatch.setattr(trace_module, "CHUNK_BYTES", 64)
    with pytest.warns(pagetrace.TraceWarning, match=r"t.log:35: offset 4097"):
        chunked = read_trace(path)
    assert chunked.attrs["engine"] == "mixed"
    with pytest.warns(pagetrace.TraceWarning):
        reference = read_trace(path, engine="python")
    assert expected_json(chunked) == expected_json(reference)
    assert len(chunked) == 39
    assert chunked["field4"].tolist()[30] == "extra"


def test_extra_column_names_never_shadow_the_base_columns(tmp_path):
    frame = _engines_agree(tmp_path, (
        b"# columns: timestamp_us path offset path pid pid\n"
        b"1 /a 0 /b 10 11\n"))
    assert list(frame.columns) == ["ts_us", "path", "offset", "kind",
                                   "field4", "pid", "field6"]
    assert frame["path"].tolist() == ["/a"]
    assert frame.attrs["columns"][3:] == ["path", "pid", "pid"]


def test_command_header_is_unescaped(tmp_path):
    path = tmp_path / "t.log"
    path.write_bytes(b"# pagetrace-format: 1\n# command: ls\\040-l\\040/a\\012b\n"
                     b"1 /a 0\n")
    assert read_trace(path).attrs["header"]["command"] == "ls -l /a\nb"


def test_recorded_firefox_trace_matches_its_trailer():
    # A real cold firefox-esr start-up recorded by tracer/trace; the
    # tracer's own trailer is the reference.
    frame = read_trace(sample("firefox-esr-startup.log.xz"))
    trailer = frame.attrs["trailer"]
    assert frame.attrs["engine"] == "arrow"
    assert frame.attrs["malformed"] == [] and trailer["lost"] == 0
    assert len(frame) == trailer["pages"] == 103550
    assert len(frame) * frame.attrs["page_size"] == trailer["bytes"]
    assert frame["path"].nunique() == trailer["files"] == 246
    assert frame.attrs["header"]["command"].startswith(
        "firefox-esr --headless --no-remote")


# ---------------------------------------------------------------------------
# The standard-library core reader (pagetrace.tracefile), which the pandas
# reader builds on and the tools use directly.

from pagetrace import tracefile  # noqa: E402

pytestmark = pytest.mark.unit   # needs no root (conftest.py)


@pytest.mark.parametrize("name", TRACE_SAMPLES + ["used"])
def test_core_reader_matches_expected(name):
    assert tracefile.read(sample(name + ".log")).expected_json() == \
        expected(name)


def test_pandas_reader_matches_expected_on_v2():
    frame = read_trace(sample("used.log"))
    assert expected_json(frame) == expected("used")
    assert frame["kind"].tolist().count("access") == 4
    assert list(frame.columns[:4]) == ["ts_us", "path", "offset", "kind"]
    assert frame.attrs["kinds"] == ["read", "access", "map"]


def test_core_pages_by_file_takes_read_records_and_sets_special_paths_apart(
        tmp_path):
    path = tmp_path / "t.log"
    path.write_bytes(b"# pagetrace-format: 2\n"
                     b"# columns: timestamp_us path offset kind\n"
                     b"# records: read access map\n"
                     b"1 /b 4096 read\n2 /a 0 read\n3 /b 0 read\n"
                     b"4 /c 0 access\n5 /a 8192 map\n"
                     b"6 //deleted/x 0 read\n7 /b 4096 read\n")
    trace = tracefile.read(path)
    pages, special = tracefile.pages_by_file(trace)
    assert list(pages.items()) == [("/b", {0, 4096}), ("/a", {0})]
    assert special == ["//deleted/x"]
    used, _ = tracefile.pages_by_file(trace, kinds=("access", "map"))
    assert used == {"/c": {0}, "/a": {8192}}


def test_core_strict_mode_and_trailer(tmp_path):
    path = tmp_path / "t.log"
    path.write_bytes(b"# end: pages=9\n1 /a 0\n2 /a 4097\n"
                     b"# end: pages=1 lost=x bytes=4096 lost=3\n")
    trace = tracefile.read(path)
    assert trace.trailer == {"pages": 1, "bytes": 4096, "files": 0,
                             "duration_us": 0, "lost": 3}
    assert trace.warnings()[-1].endswith("the tracer lost 3 events; the "
                                         "trace is incomplete")
    with pytest.raises(tracefile.MalformedTraceError) as err:
        tracefile.read(path, strict=True)
    assert str(err.value) == (f"{path}:3: offset 4097 is not a multiple of "
                              "page-size 4096")


def test_core_refuses_an_unreadable_file(tmp_path):
    with pytest.raises(tracefile.TraceError) as err:
        tracefile.read(tmp_path / "missing.log")
    assert str(err.value) == f"{tmp_path}/missing.log: No such file or directory"
