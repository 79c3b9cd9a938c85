"""Stopping a child process: its signal, a bounded wait, then SIGKILL, so
that no child outlives the code that started it; and a child that gets a
signal when its parent dies, even of SIGKILL. Standard library only."""
import ctypes
import os
import signal
import subprocess

PR_SET_PDEATHSIG = 1
_libc = ctypes.CDLL(None, use_errno=True)


def with_parent(sig=signal.SIGINT):
    """A preexec_fn for Popen: the child gets SIG when the process that
    started it ends, however it ends (prctl(PR_SET_PDEATHSIG)); a parent
    gone before the prctl took effect sends it at once."""
    parent = os.getpid()

    def arm():
        _libc.prctl(PR_SET_PDEATHSIG, int(sig), 0, 0, 0)
        if os.getppid() != parent:
            os.kill(os.getpid(), sig)
    return arm


def stop(proc, sig, timeout):
    """Sends SIG to the Popen PROC unless it has ended, waits up to TIMEOUT
    seconds for it, then kills it; its exit status."""
    if proc.poll() is None:
        proc.send_signal(sig)
    try:
        return proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        return proc.wait()
