"""The C and Python readers accept and refuse the same inputs (issue 44):
property tests (hypothesis) over traces and packs built from each format's
own pieces, good and bad, where the hand-written samples and the seeded
mutations of tests/test_pack.py pick only some.

Trace format: the C reader (lib/tracefile.c, through
replay/.output/tracefile-dump) and the Python core's
(pagetrace.core.tracefile) refuse the same files with the same reason, and
read the others alike: the same records, the same malformed lines, the
same trailer. Pack format: the C reader (lib/packfile.c, through
launch/.output/packfile-dump) and pagetrace.core.packfile give the same
pack or the same refusal, in the same words.

Hypothesis's seed is fixed (derandomize), so a run is repeatable; the
example counts are in EXAMPLES.
"""
import json
import os
import subprocess
import sys
import zlib

import pytest

from conftest import REPO

hypothesis = pytest.importorskip("hypothesis")
from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

sys.path.insert(0, os.path.join(REPO, "analysis"))
from pagetrace.core import packfile, tracefile  # noqa: E402

TRACE_DUMP = os.path.join(REPO, "replay", ".output", "tracefile-dump")
PACK_DUMP = os.path.join(REPO, "launch", ".output", "packfile-dump")
EXAMPLES = 300
SETTINGS = settings(max_examples=EXAMPLES, derandomize=True, deadline=None, database=None,
                    suppress_health_check=[HealthCheck.function_scoped_fixture,
                                           HealthCheck.too_slow])

# --- traces -----------------------------------------------------------------

GOOD_NUMBER = st.integers(0, 10**12).map(str)
NUMBER = st.one_of(GOOD_NUMBER, GOOD_NUMBER, GOOD_NUMBER, st.integers(0, 2**64 + 5).map(str),
                   st.sampled_from(["", "-1", "+5", "0x10", "1e3", "4096.0", " 7",
                                    "18446744073709551616", "007"]))
GOOD_OFFSET = st.integers(0, 64).map(lambda p: str(p * 4096))
OFFSET = st.one_of(GOOD_OFFSET, GOOD_OFFSET, GOOD_OFFSET, NUMBER)
PATH = st.one_of(
    st.sampled_from(["/usr/lib/libfoo.so", "/data/a\\040b", "/dev/vda", "/x\\012y", "rel/ative",
                     "/bad\\9escape", "/bad\\400", "/t\\134s", "/ends\\", "/nul\\000"]),
    st.text(alphabet="/abc\\0147 ", min_size=1, max_size=12))
KIND = st.sampled_from(["read", "read", "access", "access", "map", "map", "write", "READ", ""])
SEPARATOR = st.sampled_from([" ", "\t", "  ", " \t"])
GOOD_HEADERS = st.sampled_from([
    ["# pagetrace-format: 1", "# page-size: 4096", "# columns: timestamp_us path offset"],
    ["# pagetrace-format: 2", "# page-size: 4096",
     "# columns: timestamp_us path offset kind pid", "# records: read access map"]])
HEADER = st.one_of(GOOD_HEADERS, GOOD_HEADERS, st.lists(st.sampled_from([
    "# pagetrace-format: 1", "# pagetrace-format: 2", "# pagetrace-format: 3",
    "# pagetrace-format: x", "# page-size: 4096", "# page-size: 512", "# page-size: 0",
    "# page-size: 3000", "# page-size: 65536", "# columns: timestamp_us path offset",
    "# columns: timestamp_us path offset kind pid", "# columns: timestamp_us path",
    "# records: read access map", "# records: read", "# records: read bogus",
    "# command: app\\040--flag", "# comment", "#", ""]), max_size=6))
TRAILER = st.sampled_from([
    "", "# end: pages=3 bytes=12288 files=1 duration_us=5 lost=0",
    "# end: pages=x", "# end: pages=1 bytes=4096 files=1 duration_us=1 lost=2 accessed=1 mapped=0",
    "# end:"])


@st.composite
def record_line(draw):
    fields = [draw(NUMBER), draw(PATH), draw(OFFSET), draw(KIND)]
    fields += draw(st.lists(st.sampled_from(["100", "app", "254:1"]), max_size=2))
    sep = draw(SEPARATOR)
    if draw(st.integers(0, 5)) == 0:    # cut short
        fields = fields[:draw(st.integers(1, len(fields)))]
    return sep.join(fields) + draw(st.sampled_from(["", "", "", "", "\r", " "]))


@st.composite
def trace_bytes(draw):
    lines = draw(HEADER) + draw(st.lists(record_line(), max_size=8)) + [draw(TRAILER)]
    data = "\n".join(lines).encode("utf-8", "surrogateescape")
    if draw(st.booleans()):
        data += b"\n"
    if draw(st.integers(0, 20)) == 0:
        data += b"\0"
    return data


def dumped(tool, tmp_path, name, data, **kw):
    """DATA written to TMP_PATH/NAME and the C reader's dump TOOL run on
    it: (the path, the finished process)."""
    assert os.access(tool, os.X_OK), f"make builds {os.path.relpath(tool, REPO)}"
    path = tmp_path / name
    path.write_bytes(data)
    return path, subprocess.run([tool, str(path)], capture_output=True, **kw)


def c_trace(done):
    if done.returncode != 0 and not done.stdout.strip().startswith(b"{\n"):
        return {"refused": done.stderr.decode("utf-8", "replace").split(": ", 2)[-1].strip()}
    return json.loads(done.stdout)


def python_trace(data, path):
    try:
        return tracefile.parse_bytes(data, str(path)).expected_json()
    except tracefile.TraceError as err:
        return {"refused": str(err).split(": ", 1)[-1].strip()}


@SETTINGS
@given(data=trace_bytes())
def test_trace_readers_agree(tmp_path, data):
    path, done = dumped(TRACE_DUMP, tmp_path, "t.log", data)
    c, py = c_trace(done), python_trace(data, path)
    if "unsupported_version" in c:
        assert "refused" in py and "unsupported trace format version" in py["refused"], (c, py)
        return
    assert c == py, data


# --- packs ------------------------------------------------------------------

PACK_TEXT = st.text(alphabet="0123456789 :=#/\\\nabcdefxyz-rfg", max_size=3)


@st.composite
def pack_bytes(draw):
    """A pack built from its own pieces, each bent now and then (one in
    ten), signed right most of the time (so that the rules behind the
    checksum are reached)."""
    def pick(good, bad):
        return draw(st.sampled_from(bad)) if draw(st.integers(0, 9)) == 0 else draw(good)

    number = st.integers(0, 2**64 - 1).map(str)
    weird = ["", "-1", "0x10", "18446744073709551616", "1 2"]
    n_files = draw(st.integers(0, 3))
    head = ["# pagetrace-pack: " + pick(st.just("1"), ["2", " 1 ", "x", ""])]
    keys = {"page-size": pick(st.sampled_from(["4096", "512", "65536"]), ["1000", "0", "x"]),
            "created": pick(number, weird), "command": pick(
                st.sampled_from(["/usr/bin/app\\040-x", "a"]), ["\\9", "x\\400"]),
            "runs": pick(st.integers(1, 9).map(str), ["0", "-1"]),
            "read-ahead-kb": pick(st.sampled_from(["0", "128", "unchanged", "unknown"]), ["z"])}
    for key, value in keys.items():
        if draw(st.integers(0, 30)):
            head.append(f"# {key}: {value}")
    if draw(st.booleans()):
        head.append("# request-us: " + pick(st.sampled_from(["254:0=90 7:3=4100", "254:0=90"]),
                                             ["x=1", "7:3=", "", "1:2=3 1:2=4"]))
    body = []
    for _ in range(n_files):
        body.append("file " + " ".join([
            pick(st.sampled_from(["254:0", "7:3"]), ["x", "1:", "1:2:3"]), pick(number, weird),
            pick(number, weird), pick(number, weird),
            pick(st.sampled_from(["0a1b2c3d", "ffffffff"]), ["0A1B2C3D", "123"]),
            pick(st.sampled_from(["/usr/lib/a.so", "/my\\040dir/b"]), ["rel", "/bad\\9", ""])]))
    for _ in range(draw(st.integers(0, 4))):
        body.append("range " + " ".join([
            pick(st.integers(0, max(0, n_files - 1)).map(str), [str(n_files), "x"]),
            pick(st.integers(0, 9).map(str), weird), pick(st.sampled_from(["1", "2"]), ["0", "x"]),
            pick(number, weird)]))
    lines = head + body
    if draw(st.integers(0, 5)) == 0:
        lines.insert(draw(st.integers(0, len(lines))), draw(PACK_TEXT))
    data = ("\n".join(lines) + "\n").encode()
    if draw(st.integers(0, 9)):
        data += b"# crc32: %08x\n" % (zlib.crc32(data) & 0xFFFFFFFF)
    elif draw(st.booleans()):
        data += b"# crc32: 00000000\n"
    return data


def python_pack(data):
    try:
        return {"pack": packfile.as_json(packfile.parse_bytes(data))}
    except packfile.PackError as err:
        return {"refused": err.reason}


@SETTINGS
@given(data=pack_bytes())
def test_pack_readers_agree(tmp_path, data):
    _, done = dumped(PACK_DUMP, tmp_path, "p.pack", data, text=True)
    c, py = json.loads(done.stdout), python_pack(data)
    assert c == py, data
    assert done.returncode == (1 if "refused" in c else 0)
