"""make wheel's wheel and sdist (analysis/pyproject.toml), as a laptop
that received a trace would use them: a fresh venv, `pip install
WHEEL[analysis]` (the extras from PyPI or pip's cache), then the analysis
verbs on the samples' traces, outside the checkout, with no C tool on
PATH. Run by `make test-wheel`, not by `make test` (it installs pandas,
numpy, matplotlib and pyarrow: about a minute)."""
import glob
import os
import subprocess
import sys
import tarfile

import pytest

from conftest import REPO

DIST = os.path.join(REPO, "dist")
VERSION = open(os.path.join(REPO, "analysis", "pagetrace", "VERSION")).read().strip()
SAMPLES = os.path.join(REPO, "samples")


@pytest.fixture(scope="module")
def venv(tmp_path_factory):
    wheel = os.path.join(DIST, f"pagetrace-{VERSION}-py3-none-any.whl")
    if not os.path.isfile(wheel):
        pytest.fail("no wheel: run this file with `make test-wheel`", pytrace=False)
    where = tmp_path_factory.mktemp("venv")
    subprocess.run([sys.base_prefix + "/bin/python3", "-m", "venv", where], check=True)
    proc = subprocess.run([where / "bin" / "pip", "install", "-q", "--disable-pip-version-check",
                           f"{wheel}[analysis]"], capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr
    return where


def run(venv, tmp_path, *args):
    """`pagetrace ARGS` from the venv, in an empty directory, with only
    the venv and the system's /usr/bin and /bin on PATH."""
    env = {"PATH": f"{venv}/bin:/usr/bin:/bin", "HOME": str(tmp_path), "LC_ALL": "C.UTF-8"}
    return subprocess.run([venv / "bin" / "pagetrace", *args], capture_output=True,
                          text=True, cwd=tmp_path, env=env, timeout=300)


def test_no_c_tool_is_there(venv, tmp_path):
    proc = run(venv, tmp_path, "trace", "--version")
    assert proc.returncode != 0
    assert "was found" in proc.stderr
    proc = run(venv, tmp_path, "--version")
    assert proc.returncode == 0 and VERSION in proc.stdout


def test_waste_as_in_the_checkout(venv, tmp_path):
    used = os.path.join(SAMPLES, "used.log")
    proc = run(venv, tmp_path, "waste", "--json", used)
    assert proc.returncode == 0, proc.stderr
    tree = subprocess.run([os.path.join(REPO, "scripts", "pagetrace"), "waste", "--json", used],
                          capture_output=True, text=True, env=dict(os.environ))
    if tree.returncode != 0:    # the checkout's front door on a python3 without pandas
        tree = subprocess.run([sys.executable, "-m", "pagetrace", "waste", "--json", used],
                              capture_output=True, text=True,
                              cwd=os.path.join(REPO, "analysis"))
    assert tree.returncode == 0, tree.stderr
    assert proc.stdout == tree.stdout


def test_plot(venv, tmp_path):
    proc = run(venv, tmp_path, "plot", "-o", "basic", os.path.join(SAMPLES, "basic.log"))
    assert proc.returncode == 0, proc.stderr
    with open(tmp_path / "basic.png", "rb") as f:
        assert f.read(8) == b"\x89PNG\r\n\x1a\n"


def test_report(venv, tmp_path):
    proc = run(venv, tmp_path, "report", "-o", "rep", os.path.join(SAMPLES, "basic.log"))
    assert proc.returncode == 0, proc.stderr
    html = (tmp_path / "rep" / "index.html").read_text()
    assert "libfoo.so" in html


def test_the_sdist_holds_the_package():
    sdist = os.path.join(DIST, f"pagetrace-{VERSION}.tar.gz")
    with tarfile.open(sdist) as tar:
        names = set(tar.getnames())
    top = f"pagetrace-{VERSION}"
    package = os.path.join(REPO, "analysis", "pagetrace")
    shipped = {os.path.relpath(p, os.path.dirname(package))
               for p in glob.glob(package + "/**/*.py", recursive=True)}
    shipped |= {"pagetrace/VERSION", "pagetrace/device-profiles.tsv"}
    assert {f"{top}/{p}" for p in shipped} <= names
    assert f"{top}/pyproject.toml" in names
