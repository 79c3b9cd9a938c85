"""launch's command line (launch/launch.c): its numbers read by lib/'s one
number parser and its words by word_option(); a bad value is one line,
`pagetrace launch: OPTION: 'TEXT': why`, exit status 2, and CMD does not
start. --max-age's units are judged by the pack-age check itself: a pack
written here two hours old is too old for some ages and not for others."""
import os
import pathlib
import subprocess
import sys
import time

import pytest

pytestmark = pytest.mark.unit   # needs no root (conftest.py)

REPO = pathlib.Path(__file__).resolve().parent.parent
LAUNCH = REPO / "launch" / "launch"
sys.path.insert(0, str(REPO / "analysis"))
from pagetrace.core import packfile  # noqa: E402

PROG = "pagetrace launch"


@pytest.fixture(scope="module", autouse=True)
def built():
    subprocess.run(["make", "-s", "-C", str(REPO / "launch")], check=True)


def launch(*args, pack="/nonexistent-45.pack", command=("true",)):
    return subprocess.run([str(LAUNCH), *args, str(pack), "--", *command],
                          capture_output=True, text=True, timeout=30)


@pytest.mark.parametrize("option, text, why", [
    ("--max-age", "7x", "not an age (a number with s, m, h or d; default d)"),
    ("--max-age", "7D", "not an age (a number with s, m, h or d; default d)"),
    ("--max-age", "-1", "not an age (a number with s, m, h or d; default d)"),
    ("--max-age", " 7d", "not an age (a number with s, m, h or d; default d)"),
    ("--max-age", "", "not an age (a number with s, m, h or d; default d)"),
    ("--max-age", "18446744073709551616s", "too large for 64 bits"),
    # days past 64 bits of seconds: refused, not wrapped
    ("--max-age", "213503982334602d", "too large for 64 bits"),
    ("--window", "0", "less than 1"),
    ("--window", "lots", "not a size (bytes, K, M or G)"),
    ("--window", "8KB", "not a size (bytes, K, M or G)"),
    ("--window", "+8K", "not a size (bytes, K, M or G)"),
    ("--batch", "lots", "not a size (bytes, K, M or G)"),
    ("--batch", "-4M", "not a size (bytes, K, M or G)"),
    ("--batch-gap", "-1", "not a whole number"),
    ("--batch-gap", "8p", "not a whole number"),
    ("--lead", "soon", "not auto or milliseconds"),
    ("--lead", "5s", "not auto or milliseconds"),
    ("--lead", "", "not auto or milliseconds"),
    ("--lead", "600001", "not from 0 to 600000"),
    ("--gap", "-1", "not a whole number"),
    ("--gap", "2k", "not a whole number"),
    ("--mode", "fast", "not auto, concurrent, planned, sorted or none"),
    ("--mode", "", "not auto, concurrent, planned, sorted or none"),
    ("--verify", "crc", "not auto, stat or content"),
])
def test_a_bad_value_is_one_line_and_status_2(option, text, why, tmp_path):
    started = tmp_path / "started"
    done = launch(option, text, command=("touch", str(started)))
    assert (done.returncode, done.stdout, done.stderr) == \
        (2, "", f"{PROG}: {option}: '{text}': {why}\n")
    assert not started.exists()


@pytest.mark.parametrize("args", [
    ("--max-age", "0"), ("--max-age", "90m"), ("--max-age", "7"),
    ("--window", "8K"), ("--window", "1"), ("--gap", "0"),
    ("--lead", "auto"), ("--lead", "0"), ("--lead", "1500"),
    ("--batch", "0"), ("--batch", "16M"), ("--batch-gap", "0"), ("--batch-gap", "32"),
    ("--mode", "none"), ("--mode", "concurrent"), ("--verify", "stat"),
    ("--verify", "content"),
])
def test_a_good_value_goes_on_to_the_pack(args):
    """Past the options: the missing pack is said, CMD starts."""
    done = launch(*args, command=("sh", "-c", "exit 7"))
    assert done.returncode == 7
    assert done.stderr == (f"{PROG}: /nonexistent-45.pack: No such file or "
                           "directory: starting without prefetch\n")


@pytest.fixture(scope="module")
def two_hours_old(tmp_path_factory):
    pack = packfile.read(str(REPO / "samples" / "pack" / "basic.pack"))
    path = tmp_path_factory.mktemp("age") / "old.pack"
    packfile.write(pack._replace(created=int(time.time()) - 2 * 3600),
                   str(path))
    return path


@pytest.mark.parametrize("age, too_old", [
    ("0", True), ("3599s", True), ("1h", True), ("119m", True),
    ("121m", False), ("7201s", False), ("3h", False), ("1", False),
    ("1d", False),
])
def test_max_age_units(two_hours_old, age, too_old):
    done = launch("--max-age", age, pack=two_hours_old)
    assert done.returncode == 0, done.stderr
    assert ("older than --max-age" in done.stderr) == too_old, done.stderr
    assert done.stderr.count("\n") == 1
    assert os.path.exists(two_hours_old)
