"""Inside a guest of the kernel matrix: readpage.stp's cold-read checks,
guest_checks.py's readpage workloads run under tracer/readpage-stap (whose
module the host compiled into the cache) instead of tracer/readpage, with
the same ground truth (mincore, cachestat(2) where the kernel has it),
written as JSON for tests/kernels/test_stap.py to judge on the host.

    stap_guest.py --tools DIR --out FILE [--only CHECK...]
"""
import argparse
import os
import sys
import time
import traceback

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import guest_checks  # noqa: E402

CHECKS = guest_checks.READPAGE_CHECKS


class StapChecks(guest_checks.Checks):
    def run(self, tool, *args, timeout=300):
        if tool == "readpage":
            tool = "readpage-stap"
        return super().run(tool, *args, timeout=timeout)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tools", required=True, help="directory of readpage-stap")
    parser.add_argument("--out", required=True)
    parser.add_argument("--only", nargs="*", default=CHECKS, choices=CHECKS)
    args = parser.parse_args()
    results = {"kernel": guest_checks.kernel_facts(), "checks": {}}
    with guest_checks.work_areas() as mnt:
        for name in args.only:
            work = os.path.join(mnt, name)
            os.makedirs(work)
            start = time.monotonic()
            try:
                results["checks"][name] = getattr(StapChecks(args.tools, work), name)()
            except Exception:
                results["checks"][name] = {"error": traceback.format_exc()}
            results["checks"][name]["seconds"] = round(time.monotonic() - start, 1)
    guest_checks.save(args.out, results)


if __name__ == "__main__":
    main()
