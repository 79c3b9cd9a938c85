"""make dist's tarball (packaging/make-tarball, docs/install.md), as a
host without the build machine's files would use it. Run by `make
test-dist` as root (it builds the tarball first), not by `make test`.

- The static tools: `file` says statically linked, `ldd` finds nothing,
  each at most 5 MiB, each says VERSION.
- In an empty root (the tarball's files, a static busybox, /proc /sys /dev
  bound in): `trace -- busybox cat FILE` records exactly the pages that
  came into the page cache (mincore, and cachestat(2)'s evictions) and no
  page that was cached before. The paths a trace prints inside a chroot
  are issue 32's work: the file's records are found by the path's end,
  whatever the prefix (today `//dev/MAJ:MIN/...`).
- --user inside that root reads the root's /etc/passwd and /etc/group
  (the static build's answer to NSS, lib/userdb.c): the ids the command
  runs with, as busybox `id` gets them from the kernel.
- Without BTF (no /sys in the root) or as non-root: one line naming what
  is missing, non-zero exit.
- install.sh: installs under PREFIX and runs there; refuses another
  architecture's machine in one line naming the right tarball.
- The Python it ships parses as Python 3.9's grammar (RHEL 9's python3).
"""
import ast
import os
import pathlib
import shutil
import subprocess
import tarfile

import pytest

import loopimg
from conftest import REPO
from loopimg import require_root
from trace_oracle import Trace

TARBALL = os.environ.get("PAGETRACE_DIST_TARBALL", "")
VERSION = open(os.path.join(REPO, "analysis", "pagetrace", "VERSION")).read().strip()
STATIC_TOOLS = ["trace", "cachestat", "cachetop", "replay", "launch"]
MAX_TOOL_BYTES = 5 << 20
BUSYBOX_CACHE = "/var/cache/pagetrace"


@pytest.fixture(scope="module")
def unpacked(tmp_path_factory):
    """The tarball's one directory, unpacked."""
    if not os.path.isfile(TARBALL):
        pytest.fail("no tarball: run this file with `make test-dist`", pytrace=False)
    where = tmp_path_factory.mktemp("dist")
    with tarfile.open(TARBALL) as tar:
        tar.extractall(where)
    (top,) = where.iterdir()
    return top


def elf_machine(path):
    with open(path, "rb") as f:
        head = f.read(20)
    assert head[:4] == b"\x7fELF", path
    return head[18:20]


def host_static_busybox():
    """A static busybox of this machine's architecture: busybox-static's,
    when the installed one is (a foreign one may be installed for the
    arm64 guests), else busybox-static of this architecture fetched with
    apt-get download and kept under /var/cache/pagetrace."""
    mine = elf_machine("/proc/self/exe")
    installed = shutil.which("busybox")
    if installed and elf_machine(installed) == mine and "statically linked" in \
            subprocess.run(["file", "-L", installed], capture_output=True, text=True).stdout:
        return installed
    arch = subprocess.run(["dpkg", "--print-architecture"], capture_output=True,
                          text=True, check=True).stdout.strip()
    cache = os.path.join(BUSYBOX_CACHE, f"busybox-static-{arch}")
    binary = os.path.join(cache, "bin", "busybox")
    if not os.path.exists(binary):
        os.makedirs(cache, exist_ok=True)
        loopimg.run("apt-get", "download", "-q", f"busybox-static:{arch}", cwd=cache)
        (deb,) = [f for f in os.listdir(cache) if f.endswith(".deb")]
        loopimg.run("dpkg-deb", "-x", os.path.join(cache, deb), cache)
    assert elf_machine(binary) == mine
    return binary


def test_the_static_tools(unpacked):
    for tool in STATIC_TOOLS:
        path = unpacked / "bin" / f"pagetrace-{tool}"
        assert "statically linked" in loopimg.run("file", path, text=True).stdout, tool
        ldd = subprocess.run(["ldd", path], capture_output=True, text=True)
        assert "not a dynamic executable" in ldd.stdout + ldd.stderr, (tool, ldd.stdout)
        assert path.stat().st_size <= MAX_TOOL_BYTES, (tool, path.stat().st_size)
        version = loopimg.run(path, "--version", text=True).stdout
        assert VERSION in version.split(), (tool, version)


@pytest.fixture
def empty_root(ext4_image, unpacked):
    """A root holding only the tarball's files and a static busybox, on
    a fresh ext4 (its pages evictable, unlike tmpfs'), busybox also as
    /bin/sh (cachetop -c runs CMD with the shell); yields
    (root, bind) where bind() mounts /proc, /sys and /dev in it, unmounted
    after the test whatever happens."""
    root = pathlib.Path(ext4_image) / "root"
    shutil.copytree(unpacked, root, symlinks=True)
    shutil.copy(host_static_busybox(), root / "busybox")
    os.symlink("/busybox", root / "bin" / "sh")     # cachetop -c runs CMD with sh
    for d in ("proc", "sys", "dev", "data", "etc"):
        (root / d).mkdir()
    mounted = []

    def bind(*names):
        for name in names:
            loopimg.run("mount", "--bind", f"/{name}", root / name)
            mounted.append(root / name)
    try:
        yield root, bind
    finally:
        for path in reversed(mounted):
            subprocess.run(["umount", path], check=False)
        still = [str(p) for p in mounted if os.path.ismount(p)]
        shutil.rmtree(root, ignore_errors=True)
        assert not still, f"left mounted: {still}"


def in_root(root, *argv, **kw):
    kw.setdefault("capture_output", True)
    kw.setdefault("text", True)
    kw.setdefault("timeout", 120)
    return subprocess.run(["chroot", str(root), *argv], **kw)


def test_trace_in_an_empty_root_records_the_pages_mincore_shows(empty_root):
    root, bind = empty_root
    bind("proc", "sys", "dev")
    data = root / "data" / "file"
    loopimg.write_file(str(data), 300 * loopimg.PAGE + 1000)
    loopimg.evict(str(data))
    # Some pages cached before the trace: read, but not from storage by cat.
    with open(data, "rb") as f:
        f.seek(40 * loopimg.PAGE)
        f.read(8 * loopimg.PAGE)
    before = loopimg.resident_pages(str(data))
    assert before
    proc = in_root(root, "/bin/pagetrace-trace", "-o", "/trace.log", "--",
                   "/busybox", "cat", "/data/file", capture_output=False,
                   stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    after = loopimg.resident_pages(str(data))
    assert proc.returncode == 0, proc.stderr
    trace = Trace((root / "trace.log").read_text())
    assert trace.trailer is not None and trace.trailer.get("lost", "0") == "0"
    paths = {p for p in trace.paths() if p.endswith("/data/file")}
    assert len(paths) == 1, trace.paths()
    recorded = {off for _, p, off, _ in trace.read_records if p in paths}
    assert after - before, "cat read nothing from storage"
    assert recorded == after - before


def test_user_from_the_roots_etc(empty_root):
    root, bind = empty_root
    bind("proc", "sys", "dev")
    (root / "etc" / "passwd").write_text(
        "root:x:0:0:root:/root:/busybox\npt:x:1234:1235:PT:/home/pt:/busybox\n")
    (root / "etc" / "group").write_text(
        "root:x:0:\npt:x:1235:\nextra:x:2001:someone,pt\nother:x:2002:someone\n")
    proc = in_root(root, "/bin/pagetrace-trace", "-o", "/trace.log", "--user", "pt", "--",
                   "/busybox", "sh", "-c", "/busybox id -u; /busybox id -G; echo $HOME")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split("\n")[:3] == ["1234", "1235 2001", "/home/pt"]
    proc = in_root(root, "/bin/pagetrace-trace", "-o", "/trace.log", "--user", "nosuch",
                   "--", "/busybox", "true")
    assert proc.returncode != 0
    assert proc.stderr == "trace: -u: nosuch: no such user\n"


@pytest.mark.parametrize("tool, args", [
    ("trace", ["--", "/busybox", "true"]),
    ("cachestat", ["1", "1"]),
    ("cachetop", ["-c", "/busybox true"]),
])
def test_without_btf_or_permission_one_line(empty_root, tool, args):
    root, bind = empty_root
    bind("proc", "dev")     # no /sys: no /sys/kernel/btf/vmlinux
    proc = in_root(root, f"/bin/pagetrace-{tool}", *args)
    assert proc.returncode != 0
    assert proc.stderr.count("\n") == 1 and "BTF" in proc.stderr, proc.stderr
    as_nobody = subprocess.run(
        ["setpriv", "--reuid", "65534", "--regid", "65534", "--clear-groups",
         str(root / "bin" / f"pagetrace-{tool}"), *args],
        capture_output=True, text=True, timeout=60, cwd="/")
    assert as_nobody.returncode != 0
    assert as_nobody.stderr.count("\n") == 1, as_nobody.stderr
    assert "root" in as_nobody.stderr or "CAP_BPF" in as_nobody.stderr, as_nobody.stderr


def test_install_sh(unpacked, tmp_path):
    require_root()
    prefix = tmp_path / "prefix"
    proc = subprocess.run([unpacked / "install.sh", prefix], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    for tool in STATIC_TOOLS:
        assert (prefix / "bin" / f"pagetrace-{tool}").is_file()
    assert (prefix / "share" / "man" / "man8" / "pagetrace-trace.8").is_file()
    assert (prefix / "share" / "bash-completion" / "completions" / "pagetrace-trace").exists()
    # The front door on this host's python3 finds the static tools beside it.
    front = subprocess.run([prefix / "bin" / "pagetrace", "trace", "--version"],
                           capture_output=True, text=True, env={"PATH": "/usr/bin:/bin"})
    assert front.returncode == 0 and VERSION in front.stdout, front.stderr
    # Another architecture's machine: refused in one line naming its tarball.
    fake = tmp_path / "fakebin"
    fake.mkdir()
    (fake / "uname").write_text("#!/bin/sh\necho riscv64\n")
    (fake / "uname").chmod(0o755)
    proc = subprocess.run([unpacked / "install.sh", tmp_path / "other"], capture_output=True,
                          text=True, env={"PATH": f"{fake}:/usr/bin:/bin"})
    assert proc.returncode == 1
    assert proc.stderr == (f"install.sh: this is the {os.uname().machine} tarball and this "
                           f"machine is riscv64: use pagetrace-{VERSION}-riscv64-linux.tar.gz\n")
    assert not (tmp_path / "other").exists()


def test_python_it_ships_parses_as_python_3_9(unpacked):
    package = unpacked / "share" / "pagetrace" / "pagetrace"
    layers = [package] + [package / d for d in ("core", "tools")]
    files = [p for d in layers for p in d.rglob("*.py") if d != package or p.parent == package]
    assert len(files) > 20
    for path in files:
        ast.parse(path.read_text(), str(path), feature_version=(3, 9))


def test_a_missing_build_dependency_is_named(tmp_path):
    check = os.path.join(REPO, "packaging", "check-deps")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    os.symlink(shutil.which("cc"), bin_dir / "cc")
    proc = subprocess.run([check, "dist"], capture_output=True, text=True,
                          env={"PATH": str(bin_dir)})
    assert proc.returncode == 1
    assert proc.stderr == ("make dist: clang is missing: install the Debian package clang "
                           "(scripts/install-deps installs it)\n")
    # A compiler that finds no libbpf.a (as one without libbpf-dev).
    for tool in ("clang", "bpftool"):
        os.symlink(shutil.which(tool), bin_dir / tool)
    (bin_dir / "fakecc").write_text(
        '#!/bin/sh\ncase $1 in -print-file-name=libbpf.a) echo libbpf.a;; '
        '*) exec cc "$@";; esac\n')
    (bin_dir / "fakecc").chmod(0o755)
    proc = subprocess.run([check, "static"], capture_output=True, text=True,
                          env={"PATH": str(bin_dir), "CC": "fakecc"})
    assert proc.returncode == 1
    assert proc.stderr.startswith("make static: libbpf.a (for fakecc) is missing: "
                                  "install the Debian package libbpf-dev"), proc.stderr
