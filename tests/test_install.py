"""make install puts every tool and man page under PREFIX, and they run."""
import os
import subprocess

from conftest import REPO

# Installed C tools carry a pagetrace- prefix: bcc ships a `trace` too.
TOOLS = ["pagetrace-trace", "pagetrace-replay", "pagetrace-cachestat", "pagetrace-cachetop",
         "pagetrace-readpage", "pagecache", "startup-bench", "resolve-inodes"]
MAN = ["man8/pagetrace-trace.8", "man8/pagetrace-cachestat.8", "man8/pagetrace-cachetop.8",
       "man1/pagetrace-replay.1", "man1/pagecache.1", "man1/startup-bench.1"]


def test_make_install_into_destdir(tmp_path):
    dest = tmp_path / "root"
    proc = subprocess.run(["make", "-s", "-C", REPO, "install", f"DESTDIR={dest}",
                           "PREFIX=/usr/local"], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    prefix = dest / "usr" / "local"
    for tool in TOOLS:
        path = prefix / "bin" / tool
        assert os.access(path, os.X_OK), path
        help_run = subprocess.run([str(path), "--help"], capture_output=True, text=True,
                                  timeout=60)
        assert help_run.returncode == 0, (tool, help_run.stderr)
        assert "EXAMPLES" in help_run.stdout.upper(), tool
    for page in MAN:
        assert (prefix / "share" / "man" / page).is_file(), page
    assert (prefix / "share" / "pagetrace" / "readpage.bt").is_file()
    # The installed startup-bench finds its statistics module without the checkout.
    runs_csv = os.path.join(REPO, "samples", "startup-runs.csv")
    summary = subprocess.run([str(prefix / "bin" / "startup-bench"), "--summarize", runs_csv],
                             capture_output=True, text=True, timeout=60)
    # Exit 1 means "a run in the CSV failed", which the sample has on purpose.
    has_failed_run = any(",failed," in line or ",timeout," in line for line in open(runs_csv))
    assert summary.returncode == (1 if has_failed_run else 0), summary.stderr
    assert "simulated vs real cold" in summary.stdout
