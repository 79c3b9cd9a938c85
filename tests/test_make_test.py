"""`git clone ... && cd ... && sudo make test` on a fresh machine, with no
other step: in a clone without .venv/, `make test` runs the install step
(scripts/install-deps) first, before the build that needs its compilers,
once; as a user that is not root it says in one line the one command to
run, and does nothing else. The clone's install step is a stand-in that
records that it ran and makes what the real one leaves (.venv/bin/pagetrace):
the real one is CI's first step (.ci/run) and the demo's."""
import os
import shutil
import subprocess
import tempfile

import pytest

from conftest import REPO

STAND_IN = """#!/bin/sh
top=$(cd "$(dirname "$0")/.." && pwd)
echo "install-deps ran as $(id -u) with PYTHON=${PYTHON-unset}" >> "$top/install.log"
mkdir -p "$top/.venv/bin"
printf '#!/bin/sh\\n' > "$top/.venv/bin/pagetrace"
chmod +x "$top/.venv/bin/pagetrace"
"""


@pytest.fixture
def fresh_clone():
    """A clone of this commit with this tree's Makefile, no .venv/, the
    install step replaced by the stand-in; readable by every user."""
    parent = tempfile.mkdtemp(prefix="pagetrace-fresh-clone.")
    os.chmod(parent, 0o755)
    clone = os.path.join(parent, "pagetrace")
    try:
        subprocess.run(["git", "clone", "-q", REPO, clone], check=True, timeout=120)
        shutil.copy(os.path.join(REPO, "Makefile"), clone)
        with open(os.path.join(clone, "scripts", "install-deps"), "w") as f:
            f.write(STAND_IN)
        assert not os.path.exists(os.path.join(clone, ".venv"))
        yield clone
    finally:
        shutil.rmtree(parent)


def make(clone, *args, user=None):
    argv = ["make", "--no-print-directory", *args]
    if user:
        argv = ["setpriv", f"--reuid={user}", "--regid=nogroup", "--clear-groups", *argv]
    return subprocess.run(argv, cwd=clone, capture_output=True, text=True, timeout=300,
                          stdin=subprocess.DEVNULL)


def test_make_test_installs_first_on_a_fresh_clone(fresh_clone):
    """Dry run (make -n): the install step comes before the first build
    line, with -j2 too."""
    for jobs in ([], ["-j2"]):
        done = make(fresh_clone, "-n", *jobs, "test")
        lines = done.stdout.splitlines()
        assert done.returncode == 0, done.stderr[-2000:]
        install = lines.index("env -u PYTHON scripts/install-deps")
        build = next(i for i, l in enumerate(lines) if l.startswith("make -C "))
        assert install < build, lines[:20]


def test_make_test_runs_the_install_once(fresh_clone):
    """For real, the build left out (SUBDIRS=) and pytest a no-op
    (PYTHON=true): the install step runs as root, without make's PYTHON
    (install-deps reads PYTHON as the interpreter that makes the venv), then
    the tests; on the next run it does not."""
    log = os.path.join(fresh_clone, "install.log")
    done = make(fresh_clone, "test", "SUBDIRS=", "PYTHON=/bin/true")
    assert done.returncode == 0, done.stderr
    assert "make: no .venv/ yet: scripts/install-deps first" in done.stderr
    assert "-m pytest -ra tests" in done.stdout
    with open(log) as f:
        assert f.read() == "install-deps ran as 0 with PYTHON=unset\n"
    again = make(fresh_clone, "test", "SUBDIRS=", "PYTHON=/bin/true")
    assert again.returncode == 0 and "install-deps" not in again.stdout + again.stderr
    with open(log) as f:
        assert len(f.readlines()) == 1
    # `make` alone (no test goal) never installs.
    os.remove(os.path.join(fresh_clone, ".venv", "bin", "pagetrace"))
    plain = make(fresh_clone, "-n", "all")
    assert plain.returncode == 0 and "env -u PYTHON scripts/install-deps" not in plain.stdout


def test_make_test_not_as_root_says_the_command(fresh_clone):
    """Not root: one line, the command to run; no install, no build."""
    done = make(fresh_clone, "test", user="nobody")
    assert done.returncode != 0
    assert done.stderr.splitlines()[0] == (
        "make: no .venv/ yet: run sudo make test (it runs scripts/install-deps first)")
    assert not os.path.exists(os.path.join(fresh_clone, "install.log"))
    assert not os.path.exists(os.path.join(fresh_clone, "lib", ".output"))
