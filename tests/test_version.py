"""One version everywhere: analysis/pagetrace/VERSION. Every man page,
tool and package the tree makes is found from the tree itself, not from a
list: the man pages are the tracked files named NAME.[1-8]; the tools are
whatever `make install` puts in bin/ and sbin/ (so a new tool is checked
the day it is installed); the packages are the Debian package's
changelog, the wheel's metadata (pyproject.toml's dynamic version) and the
tarball's name (the Makefile's VERSION). The built artifacts say it too:
tests/test_dist.py, test_wheel.py and test_deb.py check theirs."""
import os
import re
import subprocess

import pytest

from conftest import REPO

VERSION = open(os.path.join(REPO, "analysis", "pagetrace", "VERSION")).read().strip()


def tracked(pattern):
    out = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
                         cwd=REPO, capture_output=True, check=True, text=True).stdout
    return [p for p in out.split("\0") if p and re.search(pattern, p)]


def test_every_man_page_says_it():
    pages = tracked(r"(^|/)[a-z0-9-]+\.[1-8]$")
    assert len(pages) >= 9
    for page in pages:
        th = re.search(r"^\.TH (.*)$", open(os.path.join(REPO, page)).read(), re.M)
        assert th, page
        fields = re.findall(r'"[^"]*"|\S+', th.group(1))
        assert fields[3].strip('"') == f"pagetrace {VERSION}", (page, th.group(0))


@pytest.fixture(scope="module")
def installed(tmp_path_factory):
    dest = tmp_path_factory.mktemp("install")
    proc = subprocess.run(["make", "-s", "-C", REPO, "install", f"DESTDIR={dest}",
                           "PREFIX=/usr"], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    return dest / "usr"


def test_every_installed_tool_says_it(installed):
    tools = [d / name for d in (installed / "bin", installed / "sbin") if d.is_dir()
             for name in sorted(os.listdir(d))]
    assert len(tools) >= 10
    for tool in tools:
        proc = subprocess.run([tool, "--version"], capture_output=True, text=True, timeout=60)
        assert proc.returncode == 0, (tool, proc.stderr)
        assert VERSION in re.findall(r"[0-9]+\.[0-9]+\.[0-9]+", proc.stdout), \
            (tool.name, proc.stdout)


def test_every_package_says_it():
    changelog = subprocess.run(["dpkg-parsechangelog", "-S", "Version"], cwd=REPO,
                               capture_output=True, text=True, check=True).stdout.strip()
    assert changelog == VERSION, "debian/changelog"
    pyproject = open(os.path.join(REPO, "analysis", "pyproject.toml")).read()
    assert 'version = {file = "pagetrace/VERSION"}' in pyproject
    assert not re.search(r'^version\s*=\s*"', pyproject, re.M)
    makefile = open(os.path.join(REPO, "Makefile")).read()
    assert "VERSION := $(shell cat analysis/pagetrace/VERSION)" in makefile
    assert "dist/pagetrace-$(VERSION)-$(DIST_ARCH)-linux.tar.gz" in makefile
