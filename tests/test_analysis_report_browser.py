"""The HTML report as a reader sees it: opened in a real headless Chromium
(Debian's `chromium`, scripts/install-deps), driven through the DevTools
protocol over --remote-debugging-pipe with the standard library only.

Checks: the page loads with no console error and no uncaught exception,
every <img> has decoded (naturalWidth > 0), and the findings section ends
inside the first screen (1280×900). A screenshot of the first screen is
kept in build-report/ as the test's artifact. The checker itself is tested
on pages that must fail it, so that it cannot pass by seeing nothing.
"""
import base64
import csv
import json
import lzma
import os
import select
import shutil
import statistics
import struct
import subprocess
import tempfile
import time
import zlib

import pytest

from pagetrace import cli, compare
from trace_oracle import Trace

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SAMPLES = os.path.join(REPO, "samples")
ARTIFACTS = os.path.join(REPO, "build-report")
SCREEN = {"width": 1280, "height": 900}
TIMEOUT_S = 60


def sample(name):
    return os.path.join(SAMPLES, name)


class Browser:
    """Headless Chromium on a DevTools pipe: fd 3 carries our commands in,
    fd 4 its answers and events out, each message NUL-terminated JSON."""

    def __init__(self):
        chromium = shutil.which("chromium")
        assert chromium, "chromium is not installed: run scripts/install-deps"
        self.profile = tempfile.mkdtemp(prefix="pagetrace-chromium-")
        to_child, self.to_browser = os.pipe()
        self.from_browser, from_child = os.pipe()

        def pipes_on_3_and_4():
            os.dup2(to_child, 3)
            os.dup2(from_child, 4)

        self.proc = subprocess.Popen(
            [chromium, "--headless", "--no-sandbox", "--disable-gpu",
             "--disable-quic", "--no-first-run",
             "--disable-background-networking", "--disable-component-update",
             "--disable-sync", "--hide-scrollbars",
             f"--user-data-dir={self.profile}",
             "--remote-debugging-pipe"],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL, pass_fds=(3, 4),
            preexec_fn=pipes_on_3_and_4)
        os.close(to_child)
        os.close(from_child)
        self.buffer = b""
        self.next_id = 0
        self.events = []

    def _message(self, deadline):
        while b"\0" not in self.buffer:
            left = deadline - time.monotonic()
            assert left > 0, "chromium did not answer in time"
            ready, _, _ = select.select([self.from_browser], [], [], left)
            if ready:
                chunk = os.read(self.from_browser, 1 << 16)
                assert chunk, "chromium closed its DevTools pipe"
                self.buffer += chunk
        raw, self.buffer = self.buffer.split(b"\0", 1)
        return json.loads(raw)

    def send(self, method, session=None, **params):
        """One command; returns its result, keeping the events that arrive
        meanwhile."""
        self.next_id += 1
        message = {"id": self.next_id, "method": method, "params": params}
        if session:
            message["sessionId"] = session
        os.write(self.to_browser, json.dumps(message).encode() + b"\0")
        deadline = time.monotonic() + TIMEOUT_S
        while True:
            reply = self._message(deadline)
            if reply.get("id") == self.next_id:
                assert "error" not in reply, (method, reply["error"])
                return reply["result"]
            self.events.append(reply)

    def wait_for(self, method):
        deadline = time.monotonic() + TIMEOUT_S
        while not any(e.get("method") == method for e in self.events):
            self.events.append(self._message(deadline))

    def close(self):
        try:
            self.send("Browser.close")
        except (AssertionError, OSError):
            pass
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        os.close(self.to_browser)
        os.close(self.from_browser)
        shutil.rmtree(self.profile, ignore_errors=True)


IMAGES_JS = """JSON.stringify(Array.from(document.images).map(i => ({
    alt: i.alt, complete: i.complete, width: i.naturalWidth,
    height: i.naturalHeight})))"""
FINDINGS_TEXT_JS = """(() => {
    const list = document.querySelector('ul.findings');
    return list ? list.innerText : ''; })()"""
FINDINGS_BOTTOM_JS = """(() => {
    const list = document.querySelector('ul.findings');
    return list ? list.getBoundingClientRect().bottom : -1; })()"""


def open_page(path, screenshot=None):
    """Load `path` in Chromium at 1280×900; returns (errors, images,
    findings_bottom_px, findings_text), and writes a PNG of the first
    screen to `screenshot`."""
    browser = Browser()
    try:
        target = browser.send("Target.createTarget", url="about:blank")
        session = browser.send("Target.attachToTarget", flatten=True,
                               targetId=target["targetId"])["sessionId"]
        for domain in ("Page", "Runtime", "Log"):
            browser.send(f"{domain}.enable", session)
        browser.send("Emulation.setDeviceMetricsOverride", session,
                     deviceScaleFactor=1, mobile=False, **SCREEN)
        browser.send("Page.navigate", session,
                     url="file://" + os.path.abspath(path))
        browser.wait_for("Page.loadEventFired")
        images = json.loads(browser.send(
            "Runtime.evaluate", session, expression=IMAGES_JS,
            returnByValue=True)["result"]["value"])
        bottom, text = (browser.send(
            "Runtime.evaluate", session, expression=js,
            returnByValue=True)["result"]["value"]
            for js in (FINDINGS_BOTTOM_JS, FINDINGS_TEXT_JS))
        if screenshot:
            shot = browser.send("Page.captureScreenshot", session,
                                format="png")
            with open(screenshot, "wb") as out:
                out.write(base64.b64decode(shot["data"]))
        # Console messages and exceptions arrive as events; flush the pipe
        # with one more round trip so none is still in flight.
        browser.send("Runtime.evaluate", session, expression="1")
        errors = []
        for event in browser.events:
            method, params = event.get("method"), event.get("params", {})
            if method == "Runtime.exceptionThrown":
                errors.append(params["exceptionDetails"].get("text", ""))
            elif method == "Runtime.consoleAPICalled" and \
                    params.get("type") in ("error", "assert"):
                errors.append(" ".join(str(a.get("value", ""))
                                       for a in params.get("args", [])))
            elif method == "Log.entryAdded" and \
                    params["entry"].get("level") == "error":
                errors.append(params["entry"].get("text", ""))
        return errors, images, bottom, text
    finally:
        browser.close()


def broken_images(images):
    return [i["alt"] for i in images
            if not i["complete"] or i["width"] == 0 or i["height"] == 0]


def one_pixel_png():
    """A valid 1×1 PNG, built here so that the check cannot depend on the
    report's own images."""
    def chunk(kind, data):
        return (struct.pack(">I", len(data)) + kind + data
                + struct.pack(">I", zlib.crc32(kind + data)))
    return (b"\x89PNG\r\n\x1a\n"
            + chunk(b"IHDR", struct.pack(">IIBBBBB", 1, 1, 8, 6, 0, 0, 0))
            + chunk(b"IDAT", zlib.compress(b"\0\xff\0\0\xff"))
            + chunk(b"IEND", b""))


@pytest.mark.unit
def test_checker_sees_broken_images_and_console_errors(tmp_path):
    page = tmp_path / "bad.html"
    good = base64.b64encode(one_pixel_png()).decode()
    page.write_text(
        "<!DOCTYPE html><html><body>"
        f"<img alt=\"fine\" src=\"data:image/png;base64,{good}\">"
        "<img alt=\"truncated\" src=\"data:image/png;base64,iVBORw0KGgo=\">"
        "<script>console.error('boom'); undefinedFunction();</script>"
        "</body></html>")
    errors, images, bottom, text = open_page(page)
    assert broken_images(images) == ["truncated"]
    assert [i["width"] for i in images if i["alt"] == "fine"] == [1]
    assert "boom" in errors
    assert any("undefinedFunction" in e or "Uncaught" in e for e in errors)
    assert bottom == -1 and text == ""


def _report(tmp_path):
    out = tmp_path / "report"
    assert cli.main(["report", sample("firefox-esr-startup.log.xz"),
                     "--replay-json", sample("replay-original.json"),
                     "--replay-json", sample("replay-sorted.json"),
                     "--startup", sample("startup-runs.csv"),
                     "-o", str(out)]) == 0
    return out / "index.html"


def test_report_in_a_real_browser(tmp_path):
    page = _report(tmp_path)
    os.makedirs(ARTIFACTS, exist_ok=True)
    shot = os.path.join(ARTIFACTS, "report-first-screen.png")
    errors, images, bottom, text = open_page(page, screenshot=shot)
    assert errors == []
    html = page.read_text()
    assert len(images) == html.count("<img") == 4
    assert broken_images(images) == []
    # Every figure drawn at its own size, not a broken-image icon.
    assert all(i["width"] >= 500 and i["height"] >= 300 for i in images)
    # The findings fit in the first screen, and say what the inputs say,
    # counted here without pagetrace: the trace by the tests' own oracle,
    # the start-ups with the statistics module.
    assert 0 < bottom <= SCREEN["height"]
    with lzma.open(sample("firefox-esr-startup.log.xz"), "rt",
                   errors="surrogateescape") as f:
        trace = Trace(f.read())
    pages = len(trace.records)
    assert (f"The start read {pages * 4096 / 2**20:,.1f} MiB ({pages:,} "
            f"pages) from {len(trace.paths())} files") in text
    with open(sample("startup-runs.csv")) as f:
        runs = [r for r in csv.DictReader(f) if r["status"] == "ok"]
    selective, hot = (statistics.mean(float(r["total_s"]) for r in runs
                                      if r["state"] == state)
                      for state in ("selective", "hot"))
    assert (f"Its I/O cost {(selective - hot) * 1e3:,.0f} ms") in text
    assert (f"{(selective - hot) / selective:.0%} of the "
            f"{selective * 1e3:,.0f} ms selectively cold start") in text
    with open(shot, "rb") as png:
        header = png.read(24)
    assert header[:8] == b"\x89PNG\r\n\x1a\n"
    assert int.from_bytes(header[16:20], "big") == SCREEN["width"]
    assert int.from_bytes(header[20:24], "big") == SCREEN["height"]


def test_compare_in_a_real_browser(tmp_path):
    out = tmp_path / "compare"
    compare.build_compare(sample("firefox-esr-startup.log.xz"),
                          sample("basic.log"), out,
                          sample("startup-runs.csv"),
                          sample("startup-runs.csv"))
    os.makedirs(ARTIFACTS, exist_ok=True)
    errors, images, bottom, _ = open_page(
        out / "index.html",
        screenshot=os.path.join(ARTIFACTS, "compare-first-screen.png"))
    assert errors == []
    assert len(images) == 3 and broken_images(images) == []
    assert 0 < bottom <= SCREEN["height"]


def test_readme_pictures_in_a_real_browser(tmp_path):
    # The README's pictures, as a page that shows them at their own size,
    # each as the README names it (relative to the repository).
    import re
    with open(os.path.join(REPO, "README.md")) as f:
        pictures = re.findall(r"!\[([^\]]*)\]\(([^)\s]+)\)", f.read())
    assert pictures, "the README has no picture"
    page = tmp_path / "readme.html"
    page.write_text("<!DOCTYPE html><html><body>" + "".join(
        f"<img alt=\"{alt}\" src=\"file://{os.path.join(REPO, src)}\">"
        for alt, src in pictures) + "</body></html>")
    os.makedirs(ARTIFACTS, exist_ok=True)
    errors, images, _, _ = open_page(
        page, screenshot=os.path.join(ARTIFACTS, "readme-pictures.png"))
    assert errors == []
    assert len(images) == len(pictures) and broken_images(images) == []
    assert all(i["width"] >= 500 and i["height"] >= 300 for i in images)


if __name__ == "__main__":
    pytest.main([__file__, "-q"])
