"""Shared pytest fixtures: root checks, loop-mounted filesystem images.

The tracer, replay and cache tests run against the real kernel: they load
BPF programs, mount loop devices and drop pages from the page cache, so they
need root. They fail (not skip) without it, so that a run that did not test
them cannot pass as one that did.
"""
import os
import shutil
import subprocess
import tempfile

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def require_root():
    if os.geteuid() != 0:
        pytest.fail("this test needs root (BPF, loop devices, drop_caches): "
                    "run the suite with sudo", pytrace=False)


def _run(*argv):
    subprocess.run(argv, check=True, stdout=subprocess.DEVNULL,
                   stderr=subprocess.PIPE)


class LoopImage:
    """A filesystem image on a loop device, mounted in a temporary directory."""

    def __init__(self, fstype="ext4", size_mib=256):
        require_root()
        self.workdir = tempfile.mkdtemp(prefix="pagetrace-img-", dir="/var/tmp")
        self.image = os.path.join(self.workdir, "fs.img")
        self.mountpoint = os.path.join(self.workdir, "mnt")
        os.mkdir(self.mountpoint)
        with open(self.image, "wb") as f:
            f.truncate(size_mib << 20)
        mkfs = {"ext4": ["mkfs.ext4", "-q", "-F"], "xfs": ["mkfs.xfs", "-q", "-f"],
                "btrfs": ["mkfs.btrfs", "-q", "-f"]}[fstype]
        _run(*mkfs, self.image)
        self.device = subprocess.run(
            ["losetup", "--find", "--show", self.image], check=True,
            capture_output=True, text=True).stdout.strip()
        _run("mount", "-t", fstype, self.device, self.mountpoint)
        self.dev = os.stat(self.mountpoint).st_dev

    def path(self, *parts):
        return os.path.join(self.mountpoint, *parts)

    def close(self):
        subprocess.run(["umount", self.mountpoint], check=False)
        subprocess.run(["losetup", "-d", self.device], check=False)
        shutil.rmtree(self.workdir, ignore_errors=True)


@pytest.fixture(scope="module")
def ext4_image():
    image = LoopImage("ext4")
    yield image
    image.close()


@pytest.fixture
def tmpfs_dir():
    require_root()
    path = tempfile.mkdtemp(prefix="pagetrace-tmpfs-")
    _run("mount", "-t", "tmpfs", "-o", "size=64m", "tmpfs", path)
    yield path
    subprocess.run(["umount", path], check=False)
    os.rmdir(path)
