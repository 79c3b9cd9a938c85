"""The C trace parser (replay/tracefile.c) against the shared fixtures in
samples/, through replay/.output/tracefile-dump, plus the edge cases of
docs/trace-format.md that the samples do not cover."""
import json
import pathlib
import subprocess

import pytest

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
    result = dump(SAMPLES / "malformed.log")
    lines = result.stderr.decode().splitlines()
    numbers = [int(line.split(":")[1]) for line in lines]
    assert numbers == [4, 5, 6, 7, 8, 10]
    assert all(line.startswith(f"{SAMPLES / 'malformed.log'}:")
               for line in lines)
    assert "not a multiple of page-size" in lines[1]


def test_unknown_version_error_names_it():
    result = dump(SAMPLES / "unknown-version.log")
    assert result.returncode == 1
    assert b"version '2'" in result.stderr


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


def test_bad_page_size_is_fatal():
    result = dump(text="# page-size: 1000\n1 /a 0\n")
    assert result.returncode == 1
    assert b"bad page-size '1000'" in result.stderr


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
    ("1 /a\\40b 0", b"backslash"),          # two octal digits only
    ("1 /a\\400 0", b"backslash"),          # \400 names no byte
    ("1 /a\\ 0", b"backslash"),             # trailing backslash
    ("18446744073709551616 /a 0", b"timestamp"),   # 2^64
    ("1 /a 18446744073709551616", b"64 bits"),
    ("1 /a -0", b"negative"),
    ("1 /a 0x1000", b"not an unsigned integer"),
    ("1 /a 4096\r", b"not an unsigned integer"),  # CRLF is not a separator
    ("1 /a 0 comm\\9", b"extra column"),
])
def test_malformed_record(line, reason):
    result = dump(text=f"0 /ok 0\n{line}\n")
    parsed = json.loads(result.stdout)
    assert parsed["malformed_lines"] == [2]
    assert len(parsed["records"]) == 1
    assert reason in result.stderr


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
