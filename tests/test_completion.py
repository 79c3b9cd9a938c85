"""packaging/pagetrace.bash, the bash completion of pagetrace and every
tool: `pagetrace`'s verbs, each tool's long options, the command after
`--`; each tool found under its installed name (pagetrace-trace, ...)."""
import os
import subprocess

import pytest

from conftest import REPO

COMPLETION = os.path.join(REPO, "packaging", "pagetrace.bash")
# Installed name -> the tool in the tree.
INSTALLED = {
    "pagetrace": "scripts/pagetrace",
    "pagetrace-trace": "tracer/trace",
    "pagetrace-cachestat": "tracer/cachestat",
    "pagetrace-cachetop": "tracer/cachetop",
    "pagetrace-replay": "replay/replay",
    "pagetrace-launch": "launch/launch",
}


@pytest.fixture(scope="module")
def bin_dir(tmp_path_factory):
    path = tmp_path_factory.mktemp("bin")
    for name, in_tree in INSTALLED.items():
        os.symlink(os.path.join(REPO, in_tree), path / name)
    return path


def complete(bin_dir, *words):
    """What bash offers for WORDS (the last one being completed)."""
    script = ('source "$1"; shift; COMP_WORDS=("$@"); COMP_CWORD=$(($# - 1)); '
              '_pagetrace; printf "%s\\n" "${COMPREPLY[@]}"')
    env = dict(os.environ, PATH=f"{bin_dir}:/usr/bin:/bin")
    proc = subprocess.run(["bash", "-c", script, "bash", COMPLETION, *words],
                          capture_output=True, text=True, env=env, timeout=60)
    assert proc.returncode == 0, proc.stderr
    return set(proc.stdout.split())


def test_pagetrace_verbs(bin_dir):
    assert complete(bin_dir, "pagetrace", "") >= {
        "trace", "replay", "cachestat", "cachetop", "launch", "cache", "startup", "pack"}
    assert complete(bin_dir, "pagetrace", "cach") == {"cachestat", "cachetop", "cache"}


@pytest.mark.parametrize("words, expected", [
    (["pagetrace-trace", "--out"], {"--output"}),
    (["pagetrace", "trace", "--use"], {"--used", "--user"}),
    (["pagetrace-cachestat", "--js"], {"--json"}),
    (["pagetrace-cachetop", "--js"], {"--json"}),
    (["pagetrace-replay", "--sor"], {"--sort", "--sorted"}),
    (["pagetrace-launch", "--vers"], {"--version"}),
])
def test_long_options_of_every_tool(bin_dir, words, expected):
    assert complete(bin_dir, *words) == expected


def test_the_command_after_double_dash(bin_dir):
    assert "true" in complete(bin_dir, "pagetrace-trace", "-o", "x", "--", "tru")
    # Its arguments are files.
    assert complete(bin_dir, "pagetrace-trace", "--", "cat", COMPLETION[:-2]) == {COMPLETION}
