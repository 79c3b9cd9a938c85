"""The kernel matrix's summary in pytest's output: how long each guest
took, which checks took longest in it, and the kernels' order of boot
(test_kernels.boot_order), so that CI's log shows where its minutes went."""
import sys


def pytest_terminal_summary(terminalreporter):
    matrix = sys.modules.get("test_kernels")
    results = getattr(matrix, "_results", None)
    if not results:
        return
    terminalreporter.section("kernel matrix: minutes per guest")
    for name, r in results.items():
        if "guest_seconds" not in r:
            continue
        checks = sorted(((c.get("seconds", 0), check) for check, c in r.get("checks", {}).items()),
                        reverse=True)[:3]
        slowest = ", ".join(f"{check} {seconds / 60:.1f}" for seconds, check in checks)
        terminalreporter.write_line(f"{name:12} {r['guest_seconds'] / 60:5.1f} min "
                                    f"(longest checks, min: {slowest})")
