"""tracer/readpage-stap's refusals, on the machine that runs the suite: one
line `readpage-stap: what: why`, exit 1, nothing loaded. This VM's kernel
loads no modules, so a run must stop there, before looking for systemtap
or headers; the traces themselves are checked in the kernel matrix's
guests (tests/kernels/test_stap.py, make test-stap)."""
import os
import subprocess

import pytest

from conftest import REPO, require_root

WRAPPER = os.path.join(REPO, "tracer", "readpage-stap")


def run(*args, env=None, user=None):
    require_root()
    argv = [WRAPPER, *args]
    if user:
        argv = ["setpriv", f"--reuid={user}", f"--regid={user}", "--clear-groups", *argv]
    return subprocess.run(argv, capture_output=True, text=True, timeout=60,
                          env=dict(os.environ, **(env or {})))


def readpage_modules():
    with open("/proc/modules") as f:
        return [line.split()[0] for line in f if line.startswith("readpage_")]


def refused(done, message):
    assert (done.returncode, done.stdout, done.stderr) == (1, "", f"readpage-stap: {message}\n")


@pytest.mark.skipif(os.path.exists("/proc/modules"), reason="this kernel has modules")
def test_refuses_a_kernel_without_modules(tmp_path):
    out = tmp_path / "reads.log"
    done = run("-o", str(out), "-c", "cat /etc/hostname")
    refused(done, f"kernel {os.uname().release} refuses modules: the kernel was built "
                  "without module support (no /proc/modules)")
    assert not out.exists()


@pytest.mark.skipif(not os.path.exists("/proc/modules"), reason="this kernel has no modules")
def test_refuses_missing_headers_or_systemtap():
    """Where the kernel loads modules: no systemtap, or no headers for it,
    each one line; nothing loaded."""
    done = run("-c", "true", env={"STAP": "/nonexistent/stap", "STAPRUN": "/nonexistent/staprun",
                                  "PAGETRACE_STAP_CACHE": "/nonexistent"})
    refused(done, "systemtap: not installed (staprun not found; apt-get install systemtap-runtime)")
    assert readpage_modules() == []


def test_refuses_non_root():
    refused(run("-c", "true", user="65534"),
            "must run as root (systemtap loads a kernel module): try sudo")


@pytest.mark.parametrize("args, message", [
    ([], "no command: give -c 'CMD ARGS' (see --help)"),
    (["--bogus"], "--bogus: unknown argument (see --help)"),
    (["-c"], "-c: needs a command"),
    (["--compile"], "--compile: needs a kernel build tree"),
])
def test_bad_usage(args, message):
    refused(run(*args), message)


def test_compile_without_systemtap_or_build_tree(tmp_path):
    refused(run("--compile", str(tmp_path), env={"STAP": "/nonexistent/stap"}),
            "systemtap: not installed (stap not found; apt-get install systemtap, "
            "or tests/kernels/stapkit.py)")
    refused(run("--compile", str(tmp_path), env={"STAP": "/bin/true"}),
            f"{tmp_path}: not a kernel build tree (no include/generated/utsrelease.h)")


def test_help_and_version():
    done = run("--help")
    assert done.returncode == 0 and "Examples:" in done.stdout
    assert "rmmod" in done.stdout    # how to unload after a SIGKILL
    with open(os.path.join(REPO, "analysis", "pagetrace", "VERSION")) as f:
        assert run("--version").stdout == f"readpage-stap {f.read().strip()}\n"
