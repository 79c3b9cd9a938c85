"""dockerd on a private socket, for the container tests and the container
benchmark: its own data root, exec root and containerd namespaces, so the
machine's own docker (if any) is not touched; stopped with its containers
when the `with` ends, and the parent cgroups it made removed.
"""
import contextlib
import os
import shutil
import signal
import subprocess
import tempfile
import time

from pagetrace.core import process

DOCKER = "/usr/bin/docker"      # docker.io's CLI, the daemon's own version


def docker(env, *args, timeout=120, **kw):
    kw.setdefault("check", True)
    return subprocess.run([DOCKER, *args], env=env, capture_output=True, text=True,
                          timeout=timeout, **kw)


def docker_cgroups():
    """The cgroups dockerd makes for its containers' parent, /docker, in
    each hierarchy (cgroupfs driver)."""
    return {os.path.join("/sys/fs/cgroup", h, "docker") for h in os.listdir("/sys/fs/cgroup")
            if os.path.isdir(os.path.join("/sys/fs/cgroup", h, "docker"))} | \
        ({"/sys/fs/cgroup/docker"} if os.path.isdir("/sys/fs/cgroup/docker") else set())


@contextlib.contextmanager
def daemon(data_root, name, own_mounts=False):
    """dockerd with its state in DATA_ROOT, its run files and containerd
    namespaces named after NAME; yields the environment that reaches it.
    With OWN_MOUNTS, dockerd runs in a mount namespace of its own: its
    containers' mounts are not in the machine's table (where tests that
    look for what they left would see them), and go with it. Raises
    RuntimeError when it does not answer within 60 s."""
    had = docker_cgroups()
    run_dir = tempfile.mkdtemp(prefix=f"{name}-docker-", dir="/run")
    sock = os.path.join(run_dir, "docker.sock")
    env = dict(os.environ, DOCKER_HOST=f"unix://{sock}",
               PATH="/usr/bin:/usr/sbin:" + os.environ.get("PATH", ""))
    log = open(os.path.join(run_dir, "dockerd.log"), "w")
    own = ["unshare", "--mount", "--propagation", "private"] if own_mounts else []
    proc = subprocess.Popen([*own, "dockerd", "--iptables=false", "--bridge=none",
                             "--data-root", data_root, "--exec-root", os.path.join(run_dir, "exec"),
                             "-H", f"unix://{sock}", "--pidfile", os.path.join(run_dir, "docker.pid"),
                             "--containerd-namespace", name,
                             "--containerd-plugins-namespace", f"{name}-plugins"],
                            stdout=log, stderr=subprocess.STDOUT, env=env)
    try:
        deadline = time.monotonic() + 60
        while docker(env, "version", check=False).returncode != 0:
            if proc.poll() is not None:
                raise RuntimeError("dockerd exited: " + open(log.name).read()[-2000:])
            if time.monotonic() > deadline:
                raise RuntimeError("dockerd did not answer within 60 s")
            time.sleep(0.2)
        yield env
    finally:
        process.stop(proc, signal.SIGTERM, 60)
        log.close()
        shutil.rmtree(run_dir, ignore_errors=True)
        for cgroup in docker_cgroups() - had:
            with contextlib.suppress(OSError):
                os.rmdir(cgroup)
