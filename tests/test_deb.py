"""make deb's package (debian/, packaging/make-deb) as a Debian 12 user
gets it: lintian reports no error; `apt-get install ./pagetrace_*.deb`
into a fresh Debian 12 root (mmdebstrap's minbase, from the Debian
archive) pulls its dependencies and recommends; there the tracer records
exactly the pages that came into the cache, and the analysis verbs run
on Debian 12's own numpy, pandas and matplotlib; `apt-get purge
--autoremove` leaves no file behind. Run by `make test-deb` as root, not
by `make test`.

The root is built once and kept as a tarball in /var/cache/pagetrace
(rebuilt when a week old, for bookworm's updates); each run unpacks a
copy, so nothing of one run reaches the next."""
import os
import shutil
import subprocess
import time

import pytest

import loopimg
from loopimg import require_root
from trace_oracle import Trace

DEB = os.environ.get("PAGETRACE_DEB", "")
ROOT_TARBALL = "/var/cache/pagetrace/bookworm-minbase.tar"
ROOT_MAX_AGE_S = 7 * 86400
MIRROR = "http://deb.debian.org/debian"
# What apt and dpkg keep of their own work (lists, logs, their state
# files, the downloaded archives): not files of the package.
APT_OWN = ("/var/lib/apt/", "/var/cache/apt/", "/var/log/", "/var/lib/dpkg/",
           "/var/cache/debconf/", "/var/cache/ldconfig/")


# What running matplotlib as root leaves in root's home (its font cache
# and config): a user's files, which no package's purge removes.
USER_CACHES = ("/root/.cache", "/root/.config")


def debian12_root_tarball():
    """mmdebstrap's minbase bookworm as a tarball, cached."""
    fresh = os.path.exists(ROOT_TARBALL) and \
        time.time() - os.path.getmtime(ROOT_TARBALL) < ROOT_MAX_AGE_S
    if not fresh:
        os.makedirs(os.path.dirname(ROOT_TARBALL), exist_ok=True)
        partial = ROOT_TARBALL + ".partial"
        loopimg.run("mmdebstrap", "--quiet", "--variant=minbase", "--format=tar",
                    "bookworm", partial, MIRROR)
        os.replace(partial, ROOT_TARBALL)
    return ROOT_TARBALL


@pytest.fixture(scope="module")
def root(tmp_path_factory):
    """A fresh Debian 12 root with /proc, /sys and /dev bound in and the
    host's resolv.conf (for apt); unmounted after, whatever happens."""
    require_root()
    if not os.path.isfile(DEB):
        pytest.fail("no package: run this file with `make test-deb`", pytrace=False)
    where = tmp_path_factory.mktemp("debian12") / "root"
    where.mkdir()
    loopimg.run("tar", "-xf", debian12_root_tarball(), "-C", where, "--numeric-owner")
    shutil.copy("/etc/resolv.conf", where / "etc" / "resolv.conf")
    shutil.copy(DEB, where / "tmp")
    mounted = []
    try:
        for name in ("proc", "sys", "dev"):
            loopimg.run("mount", "--bind", f"/{name}", where / name)
            mounted.append(where / name)
        yield where
    finally:
        for path in reversed(mounted):
            subprocess.run(["umount", path], check=False)
        still = [str(p) for p in mounted if os.path.ismount(p)]
        if not still:
            subprocess.run(["rm", "-rf", "--one-file-system", where], check=False)
        assert not still, f"left mounted: {still}"


def in_root(root, *argv, check=True, timeout=900):
    env = {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "DEBIAN_FRONTEND": "noninteractive",
           "LC_ALL": "C.UTF-8", "HOME": "/root"}
    proc = subprocess.run(["chroot", str(root), *argv], capture_output=True, text=True,
                          env=env, timeout=timeout)
    if check:
        assert proc.returncode == 0, (argv, proc.stdout[-2000:], proc.stderr[-2000:])
    return proc


def files_of(root):
    """Every path in the root but the bound file systems, /tmp and apt's
    and dpkg's own records."""
    found = set()
    for top, dirs, files in os.walk(root):
        rel = "/" + os.path.relpath(top, root).lstrip(".")
        if rel.rstrip("/") in ("/proc", "/sys", "/dev", "/tmp") + USER_CACHES:
            dirs[:] = []
            continue
        for name in dirs + files:
            path = os.path.join(rel, name).replace("//", "/")
            if not path.startswith(APT_OWN) and path not in USER_CACHES:
                found.add(path)
    return found


def packages_of(root):
    return set(in_root(root, "dpkg-query", "-W", "-f", "${Package}\\n").stdout.split())


def test_lintian_reports_no_error():
    if not os.path.isfile(DEB):
        pytest.fail("no package: run this file with `make test-deb`", pytrace=False)
    proc = subprocess.run(["lintian", DEB], capture_output=True, text=True, timeout=300)
    errors = [line for line in proc.stdout.splitlines() if line.startswith("E:")]
    assert not errors, proc.stdout


def test_the_package_says_the_version():
    if not os.path.isfile(DEB):
        pytest.fail("no package: run this file with `make test-deb`", pytrace=False)
    version = open(os.path.join(os.path.dirname(__file__), "..", "analysis", "pagetrace",
                                "VERSION")).read().strip()
    assert loopimg.run("dpkg-deb", "-f", DEB, "Version", text=True).stdout.strip() == version


def test_install_trace_analyse_purge(root):
    before = files_of(root)
    packages_before = packages_of(root)
    in_root(root, "apt-get", "update", "-qq")
    in_root(root, "apt-get", "install", "-y", "-qq", f"/tmp/{os.path.basename(DEB)}")
    owned = in_root(root, "dpkg", "-L", "pagetrace").stdout.split()
    assert "/usr/sbin/pagetrace-trace" in owned and "/usr/bin/pagetrace" in owned
    # The tracer, on a file of the package evicted first: exactly the pages
    # that came into the cache (the paths inside a chroot are issue 32's).
    target = "/usr/share/pagetrace/pagetrace/analysis/report.py"
    loopimg.evict(str(root) + target)
    in_root(root, "pagetrace-trace", "-o", "/tmp/cat.log", "--used", "--",
            "cat", target)
    came = loopimg.resident_pages(str(root) + target)
    trace = Trace((root / "tmp" / "cat.log").read_text())
    paths = {p for p in trace.paths() if p.endswith(target)}
    assert len(paths) == 1, trace.paths()
    assert came and {off for _, p, off, _ in trace.read_records if p in paths} == came
    # The analysis verbs on Debian 12's numpy, pandas and matplotlib (no
    # pyarrow: the reader's python engine); those that need pyarrow or
    # duckdb (not in Debian 12) say so in one line.
    waste = in_root(root, "pagetrace", "waste", "/tmp/cat.log").stdout
    (row,) = [line for line in waste.splitlines() if line.split()[:1] == list(paths)]
    assert row.split()[1] == "%.3f" % (len(came) * loopimg.PAGE / 2**20), waste
    in_root(root, "pagetrace", "summary", "/tmp/cat.log")
    in_root(root, "pagetrace", "plot", "-o", "/tmp/plot", "/tmp/cat.log")
    in_root(root, "pagetrace", "report", "-o", "/tmp/report", "/tmp/cat.log")
    assert (root / "tmp" / "report" / "index.html").is_file()
    in_root(root, "pagetrace", "compare", "-o", "/tmp/compare", "/tmp/cat.log", "/tmp/cat.log")
    convert = in_root(root, "pagetrace", "convert", "/tmp/cat.log", "-o", "/tmp/ds", check=False)
    assert convert.returncode == 1
    assert convert.stderr == ("pagetrace: convert: needs the Python module pyarrow, which is "
                              "not installed (pip install 'pagetrace[scale]')\n")
    # Purged with what it pulled in: no file left behind. apt's autoremove
    # keeps some of what it pulled in (recommended by what stays), so those
    # are purged by name, as an administrator would.
    in_root(root, "apt-get", "purge", "-y", "-qq", "--autoremove", "pagetrace")
    stayed = packages_of(root) - packages_before
    if stayed:
        in_root(root, "apt-get", "purge", "-y", "-qq", *sorted(stayed))
    assert packages_of(root) == packages_before
    after = files_of(root)
    assert not [p for p in owned if p.startswith("/usr/share/pagetrace")
                and os.path.lexists(str(root) + p)]
    assert after - before == set()
