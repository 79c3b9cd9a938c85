"""Helpers for tests that need real filesystems: small loop-mounted images,
deliberately fragmented files, page-cache residency (mincore) and extent
maps (filefrag -v).

Imported by the replay tests, by conftest.py's fixtures, and by the kernel
matrix's guest checks (tests/kernels/guest_checks.py, standard library only). Everything
created here is torn down by the context managers, even when a test fails.
"""
import contextlib
import hashlib
import os
import random
import re
import shutil
import subprocess
import tempfile
import time

import pagecache_util

PAGE = os.sysconf("SC_PAGE_SIZE")


def run(*cmd, **kw):
    """Runs a setup command, failing loudly with its stderr."""
    kw.setdefault("check", True)
    kw.setdefault("capture_output", True)
    return subprocess.run(cmd, **kw)


def require_root():
    """Fails (not skips) without root: a run that could not test the tools
    against the kernel must not pass as one that did."""
    if os.geteuid() != 0:
        import pytest  # here: the guest checks (tests/kernels/) use this module without pytest
        pytest.fail("this test needs root (BPF, loop devices, mounts, page "
                    "cache): run the suite with sudo", pytrace=False)


def have_tools(*names):
    return all(shutil.which(n) for n in names)


@contextlib.contextmanager
def loop_mount(fstype="ext4", size_mib=64, mkfs_args=(), losetup_args=()):
    """A fresh filesystem of FSTYPE in an image file, on a loop device
    (set up with LOSETUP_ARGS), mounted on a temporary directory. Yields
    (mountpoint, loop_device)."""
    workdir = tempfile.mkdtemp(prefix="pagetrace-loop-")
    image = os.path.join(workdir, "fs.img")
    mountpoint = os.path.join(workdir, "mnt")
    os.mkdir(mountpoint)
    loop = None
    mounted = False
    try:
        with open(image, "wb") as f:
            f.truncate(size_mib << 20)
        loop = run("losetup", "--find", "--show", *losetup_args, image,
                   text=True).stdout.strip()
        run(f"mkfs.{fstype}", *mkfs_args, loop)
        run("mount", loop, mountpoint)
        mounted = True
        yield mountpoint, loop
    finally:
        if mounted:
            if run("umount", mountpoint, check=False).returncode != 0:
                run("umount", "-l", mountpoint, check=False)
        if loop:
            run("losetup", "-d", loop, check=False)
        shutil.rmtree(workdir, ignore_errors=True)


@contextlib.contextmanager
def ram_mount(fstype="ramfs"):
    """A memory filesystem (no loop device needed): ramfs refuses O_DIRECT
    and FIEMAP, which is what the tests want from it."""
    mountpoint = tempfile.mkdtemp(prefix=f"pagetrace-{fstype}-")
    mounted = False
    try:
        run("mount", "-t", fstype, fstype, mountpoint)
        mounted = True
        yield mountpoint
    finally:
        if mounted:
            run("umount", "-l", mountpoint, check=False)
        shutil.rmtree(mountpoint, ignore_errors=True)


def make_fragmented(paths, chunk=16384, rounds=12, seed=1):
    """Appends CHUNK bytes to each of PATHS in turn, ROUNDS times, with an
    fsync after every append, so ext4 allocates the files' blocks
    interleaved. Returns {path: data}."""
    rng = random.Random(seed)
    data = {p: bytearray() for p in paths}
    fds = {p: os.open(p, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
           for p in paths}
    try:
        for _ in range(rounds):
            for p in paths:
                block = rng.randbytes(chunk)
                os.write(fds[p], block)
                os.fsync(fds[p])
                data[p] += block
    finally:
        for fd in fds.values():
            os.close(fd)
    return {p: bytes(d) for p, d in data.items()}


def populate_small_files(root, files, dirs, seed=7):
    """FILES small files (1 byte to 12 KiB) spread over DIRS directories:
    a filesystem whose reads are mostly metadata."""
    rng = random.Random(seed)
    for d in range(dirs):
        os.mkdir(os.path.join(root, f"d{d:03}"))
    for i in range(files):
        with open(os.path.join(root, f"d{i % dirs:03}", f"f{i:05}"), "wb") as f:
            f.write(rng.randbytes(rng.randint(1, 12 << 10)))


def diskstats_field(device, index):
    """Field INDEX of DEVICE's line in /proc/diskstats, split on blanks
    (3: reads completed, 5: sectors read): the kernel's own count."""
    name = os.path.basename(device)
    with open("/proc/diskstats") as f:
        for line in f:
            fields = line.split()
            if fields[2] == name:
                return int(fields[index])
    raise AssertionError(f"{name} not in /proc/diskstats")


def wait_idle(device, timeout=30.0):
    """Waits until DEVICE (/dev/loopN) has no request in flight, three reads
    of /sys/block/*/inflight in a row: readahead and posix_fadvise(WILLNEED)
    return before their reads complete, and mincore() shows a page only once
    its read has. False if it never was, TIMEOUT seconds in."""
    path = f"/sys/block/{os.path.basename(device)}/inflight"
    deadline, idle = time.monotonic() + timeout, 0
    while time.monotonic() < deadline:
        with open(path) as f:
            idle = idle + 1 if f.read().split() == ["0", "0"] else 0
        if idle == 3:
            return True
        time.sleep(0.01)
    return False


def write_file(path, size, seed=0):
    data = random.Random(seed).randbytes(size)
    with open(path, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    return data


_EXTENT = re.compile(r"^\s*\d+:\s+(\d+)\.\.\s*(\d+):\s+(\d+)\.\.\s*(\d+):"
                     r"\s+(\d+):")
_BLOCKS = re.compile(r"\((\d+) blocks? of (\d+) bytes\)")


def filefrag_extents(path):
    """Extents from `filefrag -v` as (logical, physical, length) in bytes,
    in file order."""
    out = run("filefrag", "-v", path, text=True).stdout
    block = int(_BLOCKS.search(out).group(2))
    extents = []
    for line in out.splitlines():
        m = _EXTENT.match(line)
        if m:
            extents.append((int(m.group(1)) * block, int(m.group(3)) * block,
                            int(m.group(5)) * block))
    return extents


def physical_of(extents, offset):
    for logical, physical, length in extents:
        if logical <= offset < logical + length:
            return physical + offset - logical
    return None


def evict(path):
    pagecache_util.evict(path)


def resident_pages(path):
    """Byte offsets of the file's pages brought into the page cache since
    evict(): resident (mincore) or reclaimed again since (pagecache_util)."""
    return {i * PAGE for i in pagecache_util.cached_since_eviction(path)}


def file_state(path):
    """What a read-only program must not change: content and times."""
    with open(path, "rb") as f:
        digest = hashlib.sha256(f.read()).hexdigest()
    st = os.stat(path)
    return digest, st.st_mtime_ns, st.st_ctime_ns, st.st_size
