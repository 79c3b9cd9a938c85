"""Stopping a child process: its signal, a bounded wait, then SIGKILL, so
that no child outlives the code that started it. Standard library only."""
import subprocess


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
