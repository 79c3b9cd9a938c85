"""lib/'s shared modules, called one at a time through tests/lib_probe.c:
the one number parser (size.c) and an option's error line (option.c), JSON
strings of any bytes (json.c), the trace format's escaping into a new string
(escape.c), a device's mount (mountinfo.c) against /proc/self/mountinfo read
here, growing arrays (array.c) and the live cgroups (cgroup.c) against
the cgroup2 hierarchy walked here."""
import json
import os
import pathlib
import subprocess

import pytest

pytestmark = pytest.mark.unit   # needs no root (conftest.py)

REPO = pathlib.Path(__file__).resolve().parent.parent
PROBE = REPO / "lib" / ".output" / "lib-probe"
U64_MAX = (1 << 64) - 1


@pytest.fixture(scope="module", autouse=True)
def built():
    subprocess.run(["make", "-s", "-C", str(REPO / "lib"), "probe"],
                   check=True)


def probe(*args, stdin=b""):
    return subprocess.run([str(PROBE), *map(str, args)], input=stdin,
                          capture_output=True, timeout=30)


@pytest.mark.parametrize("text, units, low, high, expected", [
    ("4096", "size", 0, U64_MAX, 4096),
    ("64k", "size", 0, U64_MAX, 65536),
    ("64K", "size", 0, U64_MAX, 65536),
    ("2M", "size", 0, U64_MAX, 2 << 20),
    ("1g", "size", 0, U64_MAX, 1 << 30),
    ("0", "size", 0, U64_MAX, 0),
    ("0010", "count", 0, U64_MAX, 10),
    ("17179869183G", "size", 0, U64_MAX, 17179869183 << 30),
    (str(U64_MAX), "count", 0, U64_MAX, U64_MAX),
    # all of the text, digits only: no sign, blank, base or other unit
    ("17179869184G", "size", 0, U64_MAX, "range"),
    (str(U64_MAX + 1), "count", 0, U64_MAX, "range"),
    ("0x1000", "size", 0, U64_MAX, "syntax"),
    ("-4096", "size", 0, U64_MAX, "syntax"),
    ("+1", "count", 0, U64_MAX, "syntax"),
    (" 4096", "size", 0, U64_MAX, "syntax"),
    ("4096 ", "size", 0, U64_MAX, "syntax"),
    ("4KB", "size", 0, U64_MAX, "syntax"),
    ("4 K", "size", 0, U64_MAX, "syntax"),
    ("K", "size", 0, U64_MAX, "syntax"),
    ("", "size", 0, U64_MAX, "syntax"),
    ("4k", "count", 0, U64_MAX, "syntax"),
    ("1.5", "count", 0, U64_MAX, "syntax"),
    # the range, both ends included, after the unit
    ("1", "count", 1, 256, 1),
    ("256", "count", 1, 256, 256),
    ("0", "count", 1, 256, "range"),
    ("257", "count", 1, 256, "range"),
    ("1k", "size", 1, 1024, 1024),
    ("2k", "size", 1, 1024, "range"),
])
def test_parse_number(text, units, low, high, expected):
    done = probe("number", text, units, low, high)
    assert done.returncode == 0, done.stderr
    assert done.stdout.decode().strip() == str(expected)


@pytest.mark.parametrize("text, units, low, high, line", [
    ("x", "count", 1, 256, "'x': not a whole number"),
    ("12q", "size", 1, U64_MAX, "'12q': not a size (bytes, K, M or G)"),
    ("0", "count", 1, 256, "'0': not from 1 to 256"),
    ("0", "size", 1, U64_MAX, "'0': less than 1"),
    ("17179869184G", "size", 0, U64_MAX, "'17179869184G': too large for 64 bits"),
])
def test_a_bad_option_is_one_line_and_status_2(text, units, low, high, line):
    done = probe("option", text, units, low, high)
    assert done.returncode == 2
    assert done.stdout == b""
    assert done.stderr.decode() == f"lib-probe: --opt: {line}\n"


def test_a_good_option_is_its_value():
    done = probe("option", "8M", "size", 1, U64_MAX)
    assert (done.returncode, done.stdout) == (0, b"8388608\n")


# Valid UTF-8 passes; every byte of an invalid sequence, alone.
JSON_CASES = [
    b"plain /usr/lib/x86_64-linux-gnu/libc.so.6",
    "caf\u00e9 \u65e5\u672c \U0001f600".encode(),
    b"quote \" backslash \\ slash /",
    bytes(range(0x20)) + b"\x7f",
    b"latin-1 caf\xe9",
    b"\xff\xfe\x80\xbf",
    b"\xc0\x80 overlong NUL",
    b"\xe0\x80\xaf overlong slash",
    b"\xed\xa0\x80 a UTF-16 surrogate",
    b"\xf4\x90\x80\x80 past U+10FFFF",
    b"\xe6\x97 cut short",
    b"cut at the end \xf0\x9f\x98",
    b"\x00 NUL inside",
    bytes(range(256)),
]


@pytest.mark.parametrize("raw", JSON_CASES, ids=range(len(JSON_CASES)))
def test_json_string_of_any_bytes(raw):
    """The output is valid UTF-8 and valid JSON whatever the bytes: a byte
    that is not part of valid UTF-8 is written \\udcXX (Python's
    surrogateescape), so that json.loads() gives the str Python makes of
    the same bytes, and os.fsencode() gives the bytes back."""
    done = probe("json", stdin=raw)
    assert done.returncode == 0, done.stderr
    text = done.stdout.decode("utf-8")          # strict: valid UTF-8
    assert json.loads(text) == raw.decode("utf-8", "surrogateescape")
    assert os.fsencode(json.loads(text)) == raw
    # only escapes for what JSON or UTF-8 cannot hold as it is
    assert all(0x20 <= b < 0x7f or b >= 0x80 for b in done.stdout)


def test_json_escapes_each_invalid_byte_as_a_low_surrogate():
    assert probe("json", stdin=b"a\xffb\xc3").stdout == b'"a\\udcffb\\udcc3"'


def test_json_null_for_no_text():
    assert probe("json-null").stdout == b"null"


@pytest.mark.parametrize("raw, escaped", [
    (b"a b\tc\n", rb"a\040b\011c\012"),
    (b"back\\slash", rb"back\134slash"),
    (b"nul\x00inside", rb"nul\000inside"),
    (b"del\x7f caf\xe9", rb"del\177\040caf" + b"\xe9"),
    (b"", b""),
])
def test_escape_bytes(raw, escaped):
    """The trace format's escaping of LEN bytes, NUL included (a path's
    bytes are not a C string), into a new string."""
    done = probe("escape", stdin=raw)
    assert (done.returncode, done.stdout) == (0, escaped)


def first_mounts():
    """Each device's first line of /proc/self/mountinfo, read here: its
    mount point, source and type, unescaped."""
    def unescape(field):
        return os.fsdecode(bytes(field, "utf-8").decode(
            "unicode_escape").encode("latin-1"))

    first = {}
    with open("/proc/self/mountinfo") as f:
        for line in f:
            fields, _, rest = line.partition(" - ")
            fields, rest = fields.split(), rest.split()
            first.setdefault(fields[2], (unescape(fields[4]),
                                         unescape(rest[1]), rest[0]))
    return first


def test_mount_of_dev_is_the_first_mount_of_the_device():
    first = first_mounts()
    st = os.stat("/")
    dev = f"{os.major(st.st_dev)}:{os.minor(st.st_dev)}"
    checked = [dev] + [d for d in first if d != dev][:5]
    for dev in checked:
        done = probe("mount", dev)
        assert done.returncode == 0, done.stderr
        assert tuple(os.fsdecode(done.stdout).rstrip("\n").split("\t")) == \
            first[dev], dev
    assert probe("mount", "4095:1048575").stdout == b"none\n"


def test_array_doubles_from_16():
    done = probe("array", 1000, 24)
    assert done.stdout.split() == [b"16", b"32", b"64", b"128", b"256",
                                   b"512", b"1024"]


def test_array_refuses_a_size_past_memory():
    """A capacity whose bytes overflow size_t is refused, not wrapped: the
    array stays empty."""
    done = probe("array", 1, 1 << 61)
    assert done.stdout == b"fails at 1, capacity 0\n"


def cgroup2_directories():
    """The inode numbers of the cgroup2 hierarchy's directories (a cgroup's
    id), walked here from a mount of its root; None without one."""
    with open("/proc/self/mountinfo") as f:
        roots = [line.split()[4] for line in f
                 if line.partition(" - ")[2].split()[0] == "cgroup2"
                 and line.split()[3] == "/"]
    if not roots:
        return None
    return {os.stat(top).st_ino for top, _, _ in os.walk(roots[0])}


def test_cgroup_live_ids_are_the_hierarchy_s_directories():
    """Every cgroup there, once, in order. Cgroups may come and go during
    the walk: the answer holds those of both walks here and no other."""
    before = cgroup2_directories()
    done = probe("cgroups")
    after = cgroup2_directories()
    if before is None:
        assert done.returncode == 1 and after is None
        return
    assert done.returncode == 0, done.stderr
    ids = [int(line) for line in done.stdout.split()]
    assert ids == sorted(set(ids))
    assert before & after <= set(ids) <= before | after
