"""A container's start for bench/launch_disk.py (issue 43): dockerd
started by hand inside the bench's mount namespace (`dockerd
--iptables=false --bridge=none`, its own socket, data root and containerd
namespace, as tests/test_containers.py runs it), an image made here by
`docker import` of a root built from Debian's packages (mmdebstrap: no
registry), and, on an emulated disk, the image's layer served from it: an
ext4 image holding a copy of the layer directory, mounted by diskemu and
bound over the layer's directory in this namespace, so that the
container's overlay reads its files from the emulated disk.
"""
import contextlib
import os
import pathlib
import subprocess
import tempfile
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent.parent / "analysis"))
sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent.parent / "tests"))
import private_dockerd  # noqa: E402
from private_dockerd import docker  # noqa: E402

TAG = "pagetrace-bench-pandas:1"
NAME = "pagetrace-bench-pandas"
# The start: python3 importing numpy and pandas, Debian's packages.
COMMAND = ["docker", "run", "--rm", "--name", NAME, "--network", "none", TAG,
           "python3", "-c", "import numpy, pandas"]


def root_tar(work):
    """WORK/root.tar: a Debian 12 root with python3-pandas, made once by
    mmdebstrap from Debian's packages (no registry)."""
    path = os.path.join(work, "root.tar")
    if not os.path.exists(path):
        os.makedirs(work, exist_ok=True)
        subprocess.run(["mmdebstrap", "--variant=apt", "--include=python3-pandas",
                        "--dpkgopt=path-exclude=/usr/share/doc/*",
                        "--dpkgopt=path-exclude=/usr/share/man/*", "bookworm",
                        path + ".new.tar"], check=True, capture_output=True)
        os.rename(path + ".new.tar", path)
    return path


@contextlib.contextmanager
def daemon(data_root):
    """dockerd on a private socket (tests/private_dockerd.py); the
    environment that reaches it. Stopped (its containers with it) when the
    `with` ends."""
    with private_dockerd.daemon(data_root, "pagetrace-bench") as env:
        yield env


def ensure_image(env, root_tar):
    """TAG imported from root_tar (once); the layer's directory."""
    if docker(env, "image", "inspect", TAG, check=False).returncode != 0:
        with open(root_tar, "rb") as tar:
            subprocess.run(["docker", "import", "-", TAG], stdin=tar, env=env,
                           capture_output=True, check=True)
    return docker(env, "image", "inspect", "-f", "{{.GraphDriver.Data.UpperDir}}",
                  TAG).stdout.strip()


def layer_image(layer, image):
    """IMAGE: an ext4 image holding a copy of the layer directory (made
    once), for diskemu."""
    if os.path.exists(image):
        return image
    size = int(subprocess.run(["du", "-sb", layer], capture_output=True, text=True,
                              check=True).stdout.split()[0])
    with open(image + ".new", "wb") as f:
        f.truncate((int(size * 1.3) >> 20 << 20) + (256 << 20))
    subprocess.run(["mkfs.ext4", "-q", "-F", image + ".new"], check=True)
    point = tempfile.mkdtemp(prefix="pagetrace-bench-layer-")
    subprocess.run(["mount", "-o", "loop", image + ".new", point], check=True)
    try:
        subprocess.run(["cp", "-a", layer + "/.", point], check=True)
    finally:
        subprocess.run(["umount", point], check=True)
        os.rmdir(point)
    os.rename(image + ".new", image)
    return image


def bind_over(source, target):
    subprocess.run(["mount", "--bind", source, target], check=True)
