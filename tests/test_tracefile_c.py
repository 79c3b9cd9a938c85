"""The C trace parser (lib/tracefile.c) against the shared fixtures in
samples/, through replay/.output/tracefile-dump, plus the edge cases of
docs/trace-format.md that the samples do not cover."""
import json
import pathlib
import subprocess

import pytest

pytestmark = pytest.mark.unit   # needs no root (conftest.py)

TOP = pathlib.Path(__file__).resolve().parent.parent
SAMPLES = TOP / "samples"
DUMP = TOP / "replay" / ".output" / "tracefile-dump"
SAMPLE_LOGS = sorted(SAMPLES.glob("*.log"))


@pytest.fixture(scope="module", autouse=True)
def built():
    subprocess.run(["make", "-s", "-C", str(TOP / "replay")], check=True)


def dump(path=None, text=None, lines=False):
    args = [str(DUMP)] + (["--lines"] if lines else [])
    args.append(str(path) if path else "-")
    return subprocess.run(args, input=text.encode() if text is not None
                          else None, capture_output=True, timeout=30)


def test_every_sample_has_expected_results():
    assert SAMPLE_LOGS
    for log in SAMPLE_LOGS:
        assert (SAMPLES / "expected" / f"{log.stem}.json").exists(), log


@pytest.mark.parametrize("log", SAMPLE_LOGS, ids=lambda p: p.stem)
def test_sample_matches_expected(log):
    expected = json.loads((SAMPLES / "expected" / f"{log.stem}.json")
                          .read_text())
    result = dump(log)
    assert json.loads(result.stdout) == expected
    if "unsupported_version" in expected:
        assert result.returncode == 1
    else:
        assert result.returncode == 0, result.stderr


def test_malformed_lines_reported_with_line_numbers():
    log = SAMPLES / "malformed.log"
    result = dump(log)
    assert result.stderr.decode().splitlines() == [
        f"tracefile-dump: {log}:4: fewer than three fields",
        f"tracefile-dump: {log}:5: offset 4097 is not a multiple of "
        "page-size 4096",
        f"tracefile-dump: {log}:6: timestamp is not an unsigned integer",
        f"tracefile-dump: {log}:7: offset is not an unsigned integer",
        f"tracefile-dump: {log}:8: bad escape in path",
        f"tracefile-dump: {log}:10: offset is not an unsigned integer"]


def test_unknown_version_error_names_it():
    result = dump(SAMPLES / "unknown-version.log")
    assert result.returncode == 1
    assert result.stderr.decode() == (
        f"tracefile-dump: {SAMPLES / 'unknown-version.log'}: unsupported "
        "trace format version '3' (this reader knows 1, 2)\n")


def test_headerless_trace_is_version_1():
    result = dump(text="5 /a 0\n")
    assert json.loads(result.stdout)["records"] == [[5, "/a", 0, []]]


def test_page_size_header_sets_alignment():
    text = "# page-size: 16384\n1 /a 16384\n2 /a 4096\n"
    result = dump(text=text)
    parsed = json.loads(result.stdout)
    assert parsed["page_size"] == 16384
    assert parsed["records"] == [[1, "/a", 16384, []]]
    assert parsed["malformed_lines"] == [3]


@pytest.mark.parametrize("value", ["1000", "256", "2147483648", "4k",
                                   "+4096", "", "4096x"])
def test_bad_page_size_is_fatal(value):
    result = dump(text=f"# page-size: {value}\n1 /a 0\n")
    assert result.returncode == 1
    assert result.stderr.decode() == \
        f"tracefile-dump: -: bad page-size '{value}'\n"
    assert b"records" not in result.stdout


V2_HEADER = ("# pagetrace-format: 2\n# columns: timestamp_us path offset kind"
             "\n# records: read access map\n")


@pytest.mark.parametrize("data, reason", [
    (b"", "empty file"),
    (b"1 /a 0\n2 /a 4096\n\x003 /a 8192\n", "binary data (NUL byte), "
     "not a trace"),
    (b"# pagetrace-format: 2\n# records: read\n1 /a 0 read\n# \x00\n",
     "binary data (NUL byte), not a trace"),
    (b"# pagetrace-format: 1.0\n1 /a 0\n", "unsupported trace format "
     "version '1.0' (this reader knows 1, 2)"),
    (b"# pagetrace-format: 0\n", "unsupported trace format version '0' "
     "(this reader knows 1, 2)"),
    # Version first, then page-size, whatever their order in the header.
    (b"# page-size: 3\n# pagetrace-format: 9\n1 /a 0\n",
     "unsupported trace format version '9' (this reader knows 1, 2)"),
    (b"# pagetrace-format: 2\n# columns: timestamp_us path offset\n"
     b"# records: read\n1 /a 0 read\n",
     "bad header: columns: version 2 needs 'kind' as the fourth name"),
    (b"# pagetrace-format: 2\n# columns: timestamp_us path offset pid\n"
     b"# records: read\n1 /a 0 read\n", "bad header: columns: version 2 "
     "needs 'kind' as the fourth name, not 'pid'"),
    (b"# pagetrace-format: 2\n1 /a 0 read\n",
     "bad header: no records key (version 2 needs it)"),
    (b"# pagetrace-format: 2\n# records: read write\n1 /a 0 read\n",
     "bad header: records: unknown record kind 'write'"),
])
def test_refused_file(data, reason):
    result = subprocess.run([str(DUMP), "-"], input=data,
                            capture_output=True, timeout=30)
    assert result.returncode == 1
    assert result.stderr.decode() == f"tracefile-dump: -: {reason}\n"
    assert b"records" not in result.stdout


def test_version_2_without_columns_has_kind_fourth():
    parsed = json.loads(dump(text="# pagetrace-format: 2\n# records: read\n"
                             "1 /a 0 read\n").stdout)
    assert parsed["columns"] == ["timestamp_us", "path", "offset", "kind"]
    assert parsed["records"] == [[1, "/a", 0, ["read"]]]


def test_version_2_trailer_counts_access_and_map_records():
    parsed = json.loads(dump(text=V2_HEADER + "1 /a 0 read\n2 /a 0 access\n"
                             "# end: pages=1 lost=0 accessed=1\n").stdout)
    assert parsed["trailer"] == {"pages": 1, "bytes": 0, "files": 0,
                                 "duration_us": 0, "lost": 0, "accessed": 1,
                                 "mapped": 0}


def test_header_values_lose_carriage_returns():
    text = ("# pagetrace-format: 2\r\n# page-size: 8192\r\n# columns: "
            "timestamp_us path offset kind\r\n# records: read map\r\n"
            "1 /a 8192 map\n")
    parsed = json.loads(dump(text=text).stdout)
    assert (parsed["version"], parsed["page_size"]) == (2, 8192)
    assert parsed["records"] == [[1, "/a", 8192, ["map"]]]


def test_carriage_return_lines_are_blank_also_in_the_header():
    text = "# page-size: 8192\r\n\r\n \t\r\n# columns: a b c x\r\n1 /a 0\r\n"
    result = dump(text=text)
    parsed = json.loads(result.stdout)
    assert parsed["columns"] == ["a", "b", "c", "x"]
    assert parsed["page_size"] == 8192
    assert parsed["malformed_lines"] == [5]


def test_lines_output_of_version_2(tmp_path):
    out = dump(SAMPLES / "used.log", lines=True).stdout.decode()
    assert out.splitlines()[4] == ("12 1763784000000005 /usr/lib/libfoo.so "
                                   "4096 access 100 100 app fault 254:1 12")


def test_usage_help_and_version():
    assert subprocess.run([str(DUMP)], capture_output=True).returncode == 2
    assert subprocess.run([str(DUMP), "a", "b"],
                          capture_output=True).returncode == 2
    helped = subprocess.run([str(DUMP), "--help"], capture_output=True,
                            text=True)
    assert helped.returncode == 0 and "EXAMPLES" in helped.stdout
    version = subprocess.run([str(DUMP), "--version"], capture_output=True,
                             text=True)
    assert version.returncode == 0
    assert version.stdout.startswith("tracefile-dump ")


def test_header_keys_after_first_record_are_ignored():
    text = "1 /a 0\n# pagetrace-format: 2\n# page-size: 8192\n2 /a 4096\n"
    parsed = json.loads(dump(text=text).stdout)
    assert parsed["page_size"] == 4096
    assert len(parsed["records"]) == 2


def test_last_trailer_wins_and_unknown_keys_ignored():
    text = ("1 /a 0\n# end: pages=9 lost=3\n"
            "# end: pages=1 bytes=4096 files=1 duration_us=0 lost=0 x=7\n")
    assert json.loads(dump(text=text).stdout)["trailer"] == {
        "pages": 1, "bytes": 4096, "files": 1, "duration_us": 0, "lost": 0}


@pytest.mark.parametrize("line, reason", [
    ("1 /a", "fewer than three fields"),
    ("1 /a\\40b 0", "bad escape in path"),   # two octal digits only
    ("1 /a\\400 0", "bad escape in path"),   # \\400 names no byte
    ("1 /a\\ 0", "bad escape in path"),      # trailing backslash
    ("18446744073709551615 /a 0 x", None),     # 2^64 - 1 is fine
    ("18446744073709551616 /a 0", "timestamp does not fit in 64 bits"),
    ("\u00b2 /a 0", "timestamp is not an unsigned integer"),  # superscript 2
    ("\u0661 /a 0", "timestamp is not an unsigned integer"),  # Arabic 1
    ("-1 /a 0", "timestamp is not an unsigned integer"),
    ("1 /a 18446744073709551616", "offset does not fit in 64 bits"),
    ("1 /a -0", "offset is not an unsigned integer"),
    ("1 /a -4096", "offset is not an unsigned integer"),
    ("1 /a +4096", "offset is not an unsigned integer"),
    ("1 /a 0x1000", "offset is not an unsigned integer"),
    ("1 /a 4\u00b2", "offset is not an unsigned integer"),
    ("1 /a 4097", "offset 4097 is not a multiple of page-size 4096"),
    ("1 /a 0 comm\\9", "bad escape in an extra column"),
    # A carriage return is not a separator: it is reported as such, last.
    ("1 /a 4096\r", "carriage return at end of line (CRLF line endings?)"),
    ("1 /a 4096 x\r", "carriage return at end of line (CRLF line endings?)"),
    # First failing check wins, in the order of the spec.
    ("x /a 4097", "timestamp is not an unsigned integer"),
    ("1 /a\\9 4097", "offset 4097 is not a multiple of page-size 4096"),
    ("1 /a\\9 0 x\\9", "bad escape in path"),
    ("x /a\r", "fewer than three fields"),
    ("x /a 0\r", "timestamp is not an unsigned integer"),
])
def test_malformed_record(line, reason):
    result = dump(text=f"0 /ok 0\n{line}\n")
    parsed = json.loads(result.stdout)
    assert result.returncode == 0
    if reason is None:
        assert parsed["malformed_lines"] == [] and not result.stderr
        return
    assert parsed["malformed_lines"] == [2]
    assert len(parsed["records"]) == 1
    assert result.stderr.decode() == f"tracefile-dump: -:2: {reason}\n"


@pytest.mark.parametrize("line, reason", [
    ("1 /a 0", "no record kind"),
    ("1 /a", "fewer than three fields"),
    ("1 /a 0 write", "unknown record kind 'write'"),
    ("1 /a 0 READ", "unknown record kind 'READ'"),
    ("1 /a 0 r\\040d", "unknown record kind 'r\\040d'"),
    ("1 /a 0 map", "record kind 'map' not declared in the records header"),
    ("x /a 0 write", "timestamp is not an unsigned integer"),
    ("1 /a 1 write", "offset 1 is not a multiple of page-size 4096"),
    ("1 /a\\9 0 write", "bad escape in path"),
    ("1 /a 0 re\\9d", "bad escape in an extra column"),
    ("1 /a 0 write\r", "unknown record kind 'write'"),
    ("1 /a 0 access\r", "carriage return at end of line (CRLF line "
     "endings?)"),
])
def test_malformed_version_2_record(line, reason):
    text = ("# pagetrace-format: 2\n# columns: timestamp_us path offset "
            "kind comm\n# records: read access\n"
            f"0 /ok 0 read\n{line}\n1 /ok 0 access x\n")
    result = dump(text=text)
    parsed = json.loads(result.stdout)
    assert result.returncode == 0
    assert parsed["malformed_lines"] == [5]
    assert parsed["records"] == [[0, "/ok", 0, ["read"]],
                                 [1, "/ok", 0, ["access", "x"]]]
    assert result.stderr.decode() == f"tracefile-dump: -:5: {reason}\n"


def test_all_records_malformed_is_still_read():
    result = dump(text="# pagetrace-format: 2\n# records: read\n1 /a 0\n"
                  "2 /a 0 map\n")
    assert result.returncode == 0
    parsed = json.loads(result.stdout)
    assert parsed["records"] == [] and parsed["malformed_lines"] == [3, 4]


def test_undecodable_bytes_round_trip_like_surrogateescape():
    raw = b"/x/\xff\xc3\xa9\xe2\x82\x00"
    text = "1 " + "".join(f"\\{b:03o}" if b < 0x21 or b > 0x7e or b == 0x5c
                          else chr(b) for b in raw) + " 0\n"
    path = json.loads(dump(text=text).stdout)["records"][0][1]
    assert path == raw.decode("utf-8", "surrogateescape")


def test_lines_output_reescapes_paths():
    result = dump(SAMPLES / "escaped.log", lines=True)
    first = result.stdout.decode().splitlines()[0]
    assert first == ("6 1763784000000000 /mnt/img/a\\040b\\012c 0 100 100 "
                     "weird\\040app sync_ra 7:0 12")


def test_empty_and_blank_input():
    parsed = json.loads(dump(text="\n   \n\t\n").stdout)
    assert parsed["records"] == [] and parsed["trailer"] is None
