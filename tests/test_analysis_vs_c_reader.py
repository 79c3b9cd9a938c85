"""Differential test: the Python reader (both engines) against the C reader
(lib/tracefile.c through replay/.output/tracefile-dump) on the shared
samples, the fuzz corpus and a few hundred seeded random traces. Both must
agree on records, malformed line numbers, trailer and header, and reject
the same files.

Both accept timestamps and offsets up to 2**64 - 1 (the Python reader's
columns become uint64 when a value needs it) and refuse the same files
with the same reasons (see also samples/conformance/ and
tests/test_conformance.py)."""
import json
import pathlib
import random
import subprocess
import warnings

import pytest

import pagetrace
from pagetrace import expected_json, parse_trace_bytes

pytestmark = pytest.mark.unit   # needs no root (conftest.py)

TOP = pathlib.Path(__file__).resolve().parent.parent
DUMP = TOP / "replay" / ".output" / "tracefile-dump"



@pytest.fixture(autouse=True, scope="module")
def dump_built():
    assert DUMP.exists(), f"{DUMP} is not built: run make"


def c_reader(data):
    """What the C reader makes of `data`: its JSON, or None if it refused
    the file without printing any."""
    result = subprocess.run([str(DUMP), "-"], input=data, capture_output=True,
                            timeout=30)
    return json.loads(result.stdout) if result.stdout.strip() else None


def python_reader(data, engine):
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", pagetrace.TraceWarning)
            frame = parse_trace_bytes(data, engine=engine)
    except pagetrace.UnsupportedVersionError as err:
        return {"unsupported_version": err.version}
    except pagetrace.TraceError:
        return None
    return expected_json(frame)


def fixed_inputs():
    files = sorted((TOP / "samples").glob("*.log"))
    files += sorted((TOP / "tests" / "fuzz-corpus").glob("*"))
    return [pytest.param(f.read_bytes(), id=f.name) for f in files
            if f.is_file()]


# Pieces of random traces: good records, each kind of malformed record,
# comments, header and trailer lines in odd places, blank lines.
PATHS = [b"/a", b"/usr/lib/libx.so", b"/sp\\040ace", b"/t\\011ab",
         b"/caf\xc3\xa9", b"/raw\xff", b"/h#sh", b"//deleted/gone",
         b"/bad\\9", b"/big\\400"]
EXTRAS = [b"1", b"read", b"w\\040x", b"-", b"7:0", b"x\\q"]


def random_line(rng, n_fields=None):
    """One line; with `n_fields`, records always have that many fields and
    single separators (the shape the fast engine reads itself)."""
    kind = rng.random()
    if kind < 0.08:
        return rng.choice([b"# comment", b"#", b"# end: pages=3 lost=1",
                           b"#end:lost=2", b"# end: pages=x lost=99999999999999999999",
                           b"# page-size: 8192", b"# columns: a b c d"])
    if kind < 0.13:
        return rng.choice([b"", b"   ", b"\t"])
    sep = rng.choice([b" ", b" ", b" ", b"\t", b"  ", b" \t "]
                     if n_fields is None else [b" ", b" ", b"\t"])
    ts = rng.choice([b"%d" % rng.randrange(10**15, 10**16)] * 6 +
                    [b"x1", b"-5", b"+5", b"1.0", b"0x1f", b"99999999999999999999999",
                     b"18446744073709551615", b"18446744073709551616",
                     b"9223372036854775808"])
    offset = rng.choice([b"%d" % (4096 * rng.randrange(0, 10**6))] * 6 +
                        [b"4097", b"-4096", b"0x1000", b"12x", b"1e3",
                         b"18446744073709551616", b"18446744073709547520",
                         b"\xc2\xb2"])
    fields = [ts, rng.choice(PATHS), offset]
    if n_fields is not None:
        return sep.join(fields + [rng.choice(EXTRAS)
                                  for _ in range(n_fields - 3)])
    if rng.random() < 0.1:
        fields = fields[:rng.randrange(0, 3)]
    fields += [rng.choice(EXTRAS) for _ in range(rng.choice([0, 0, 0, 1, 2]))]
    line = sep.join(fields)
    if rng.random() < 0.05:
        line = rng.choice([b" ", b"\t"]) + line
    if rng.random() < 0.05:
        line += rng.choice([b" ", b"\t", b"\r"])
    return line


def random_trace(seed, uniform=False):
    rng = random.Random(seed)
    header = []
    n_fields = 3
    if rng.random() < 0.7:
        header.append(b"# pagetrace-format: 1")
    if rng.random() < 0.3:
        header.append(b"# page-size: " + rng.choice([b"4096", b"8192", b"65536"]))
    if rng.random() < 0.3:
        header.append(b"# columns: timestamp_us path offset pid cause")
        n_fields = 5
    lines = header + [random_line(rng, n_fields if uniform else None)
                      for _ in range(rng.randrange(0, 25))]
    data = b"\n".join(lines)
    return data if rng.random() < 0.2 else data + b"\n"


@pytest.mark.parametrize("engine", ["auto", "python"])
@pytest.mark.parametrize("data", fixed_inputs())
def test_fixed_inputs_agree_with_c(data, engine):
    assert python_reader(data, engine) == c_reader(data)


@pytest.mark.parametrize("engine", ["auto", "python"])
@pytest.mark.parametrize("seed", range(150))
def test_random_traces_agree_with_c(seed, engine):
    data = random_trace(seed)
    assert python_reader(data, engine) == c_reader(data), data


@pytest.mark.parametrize("seed", range(150))
def test_random_uniform_traces_agree_with_c(seed):
    # Records of one shape, so that the fast engine reads most of them
    # itself, with bad values, escapes, comments and blank lines mixed in.
    data = random_trace(seed, uniform=True)
    assert python_reader(data, "auto") == c_reader(data), data


KINDS = [b"read", b"read", b"access", b"map", b"write", b"\\162ead", b"ma\\p"]


def random_v2_trace(seed):
    """A random trace made version 2: a kind (sometimes unknown, undeclared
    or badly escaped) after the offset of each record line."""
    rng = random.Random(seed)
    declared = rng.choice([b"read access map", b"read access", b"read",
                           b"read map"])
    lines = [b"# pagetrace-format: 2", b"# columns: timestamp_us path offset kind",
             b"# records: " + declared]
    for line in random_trace(seed).split(b"\n"):
        if line.startswith((b"# pagetrace-format", b"# columns")):
            continue  # the version 2 header above counts
        fields = line.split(b" ")
        if line.startswith(b"#") or len(fields) < 3 or rng.random() < 0.1:
            lines.append(line)
            continue
        lines.append(b" ".join(fields[:3] + [rng.choice(KINDS)] + fields[3:]))
    return b"\n".join(lines) + b"\n"


@pytest.mark.parametrize("engine", ["auto", "python"])
@pytest.mark.parametrize("seed", range(100))
def test_random_v2_traces_agree_with_c(seed, engine):
    data = random_v2_trace(seed)
    assert python_reader(data, engine) == c_reader(data), data
