"""Shared pytest fixtures: a loop-mounted ext4 image and a tmpfs.

The tracer, replay and cache tests run against the real kernel: they load
BPF programs, mount loop devices and drop pages from the page cache, so they
need root. They fail (not skip) without it, so that a run that did not test
them cannot pass as one that did. The mounting itself lives in loopimg.py.
"""
import os

import pytest

import loopimg
from loopimg import require_root  # noqa: F401  (the test modules import it from here)

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.fixture(scope="module")
def ext4_image():
    """A 256 MiB ext4 filesystem on a loop device; yields its mount point."""
    require_root()
    with loopimg.loop_mount("ext4", size_mib=256) as (mountpoint, _):
        yield mountpoint


@pytest.fixture
def tmpfs_dir():
    require_root()
    with loopimg.ram_mount("tmpfs") as path:
        yield path
