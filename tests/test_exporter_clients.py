"""cachestat --openmetrics against hostile clients (issue 44): one exporter,
started once for the module (`--cgroup` of a cgroup of its own, one-second
samples, `-j`), takes clients that reset before and during the answer,
100 idle connections, a byte a second, a reader that takes nothing, 64 KiB
of headers, garbage, keep-alive, pipelining, HEAD, unknown paths and
methods, and 1,000 scrapes a second for 10 s. Loopback only; each attack
bounded in count and time.

After each: the exporter still runs, and a normal scrape (Prometheus'
Accept header) is answered within 100 ms and parsed by prometheus_client's
OpenMetrics parser. At the end: no sample interval slipped by more than
10% (the line times, taken by a process of their own), the exporter holds
no connection it was given, and its counts are exact: a reader in its
cgroup reads a file cold then warm, and the scrape's counters equal the
kernel's (mincore and cachestat(2): the pages brought in since eviction)
and cachestat's own -j lines.
"""
import contextlib
import http.client
import json
import os
import random
import select
import signal
import socket
import struct
import subprocess
import sys
import threading
import time

import pytest

from conftest import require_root
from pagecache_util import PAGE, cached_since_eviction
from test_cgroup import (CACHESTAT, _free_loopback_port, _leave, _mounts, _own_cgroup, attached,
                         files, finish, go, reader)
from test_trace_used import big_ra_ext4, data_dir  # noqa: F401 (fixtures)

KiB = 1024
INTERVAL = 1.0
# Prometheus 2.49 to 2.55's default scrape_protocols, and 3.x's (acceptHeader() of
# its scrape/scrape.go builds them from the protocols' list, by weight).
PROMETHEUS_2 = ("application/openmetrics-text;version=1.0.0;q=0.5,application/openmetrics-text;"
                "version=0.0.1;q=0.4,text/plain;version=0.0.4;q=0.3,*/*;q=0.2")
PROMETHEUS_3 = ("application/openmetrics-text;version=1.0.0;escaping=underscores;q=0.6,"
                "application/openmetrics-text;version=0.0.1;q=0.5,text/plain;version=1.0.0;"
                "escaping=underscores;q=0.4,text/plain;version=0.0.4;q=0.3,*/*;q=0.2")
PROMETHEUS_TEXT_ONLY = "text/plain;version=0.0.4;q=0.6,*/*;q=0.5"
# Line times: stamped by a process of their own, so that the clients this
# test runs do not delay them.
STAMPER = ("import sys, time\n"
           "for line in iter(sys.stdin.buffer.readline, b''):\n"
           "    sys.stdout.write('%.6f %s' % (time.monotonic(), line.decode()))\n"
           "    sys.stdout.flush()\n")


class Exporter:
    def __init__(self, proc, stamper, port, cgroup, lines):
        self.proc, self.stamper, self.port, self.cgroup, self.lines = \
            proc, stamper, port, cgroup, lines
        self.started = time.monotonic()

    def alive(self):
        assert self.proc.poll() is None, f"cachestat died: {self.proc.returncode}"

    def sockets(self):
        n = 0
        for fd in os.listdir(f"/proc/{self.proc.pid}/fd"):
            with contextlib.suppress(OSError):
                n += os.readlink(f"/proc/{self.proc.pid}/fd/{fd}").startswith("socket:")
        return n


@pytest.fixture(scope="module")
def exporter(tmp_path_factory):
    require_root()
    mounts = _mounts()
    if "v2" not in mounts:
        pytest.skip("this machine mounts no cgroup2 hierarchy")
    cgroup = os.path.join(mounts["v2"] + _own_cgroup("v2"), f"pagetrace-exporter-{os.getpid()}")
    os.mkdir(cgroup)
    port = _free_loopback_port()
    lines = tmp_path_factory.mktemp("exporter") / "lines"
    proc = subprocess.Popen([CACHESTAT, "--cgroup", cgroup, "--openmetrics", f"127.0.0.1:{port}",
                             "-j", str(INTERVAL)], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE)
    with open(lines, "w") as out:
        stamper = subprocess.Popen([sys.executable, "-c", STAMPER], stdin=proc.stdout, stdout=out)
    proc.stdout.close()
    try:
        attached(proc)
        yield Exporter(proc, stamper, port, cgroup, lines)
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait()
        stamper.wait(timeout=30)
        _leave(cgroup)


def request(port, raw, timeout=10.0):
    """Sends @raw, reads to the end: (the bytes, seconds to the last one)."""
    start = time.monotonic()
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as s:
        s.sendall(raw)
        got = b""
        while chunk := s.recv(65536):
            got += chunk
    return got, time.monotonic() - start


def split_response(raw):
    """(status, {lowercase header: value}, body) of one HTTP response."""
    head, _, body = raw.partition(b"\r\n\r\n")
    status_line, *header_lines = head.decode("latin-1").split("\r\n")
    headers = {}
    for line in header_lines:
        name, _, value = line.partition(":")
        headers[name.strip().lower()] = value.strip()
    return int(status_line.split()[1]), headers, body


def parse_openmetrics(body):
    from prometheus_client.openmetrics.parser import text_string_to_metric_families
    return list(text_string_to_metric_families(body.decode()))


def normal_scrape(exporter, accept=PROMETHEUS_3, limit=0.1):
    """A scrape as Prometheus sends it (a fresh connection): answered within
    @limit seconds, 200, OpenMetrics the official parser reads."""
    raw = (f"GET /metrics HTTP/1.1\r\nHost: 127.0.0.1:{exporter.port}\r\nUser-Agent: "
           f"Prometheus/3.0.0\r\nAccept: {accept}\r\nAccept-Encoding: gzip\r\n"
           f"X-Prometheus-Scrape-Timeout-Seconds: 10\r\nConnection: close\r\n\r\n").encode()
    got, took = request(exporter.port, raw)
    status, headers, body = split_response(got)
    assert status == 200, got[:200]
    assert headers["content-type"] == \
        "application/openmetrics-text; version=1.0.0; charset=utf-8"
    assert int(headers["content-length"]) == len(body)
    families = parse_openmetrics(body)
    assert took < limit, f"a scrape took {took * 1000:.0f} ms"
    return families, took


def test_resets_before_and_during_the_answer(exporter):
    """200 clients that reset (SO_LINGER 0) right after connecting, after a
    part of the request, after the request, and after the first bytes of
    the answer: the exporter writes to sockets already reset, which killed
    it with SIGPIPE before."""
    rng = random.Random(44)
    req = f"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n".encode()
    for i in range(200):
        s = socket.create_connection(("127.0.0.1", exporter.port), timeout=5)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        when = i % 4
        if when == 1:
            s.sendall(req[:rng.randrange(1, len(req))])
        elif when >= 2:
            s.sendall(req)
        if when == 3:
            s.recv(rng.randrange(1, 64))
        s.close()
    exporter.alive()
    normal_scrape(exporter)


def test_scrape_within_100ms_while_100_idle(exporter):
    """100 connections that send nothing, and 20 that sent half a head,
    stay open; 20 normal scrapes meanwhile are each answered within 100 ms."""
    idle = [socket.create_connection(("127.0.0.1", exporter.port)) for _ in range(100)]
    half = [socket.create_connection(("127.0.0.1", exporter.port)) for _ in range(20)]
    try:
        for s in half:
            s.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\n")
        took = [normal_scrape(exporter)[1] for _ in range(20)]
    finally:
        for s in idle + half:
            s.close()
    exporter.alive()
    print(f"100 idle: 20 scrapes, max {max(took) * 1000:.1f} ms")
    assert max(took) < 0.1, took


def slow_client(port, out):
    """A byte a second of a request head: told 408 (or closed) within the
    exporter's 10 s for a head, not served forever."""
    start = time.monotonic()
    with socket.create_connection(("127.0.0.1", port), timeout=20) as s:
        got = b""
        for byte in b"GET /metrics HTTP/1.1\r\nHost: slow\r\n":
            try:
                s.send(bytes([byte]))
            except OSError:
                break
            s.settimeout(1.0)
            try:
                got = s.recv(4096)
                break
            except socket.timeout:
                continue
        s.settimeout(20)
        with contextlib.suppress(OSError):
            while chunk := s.recv(4096):
                got += chunk
    out["slow"] = (got, time.monotonic() - start)


def stuck_reader(port, out):
    """Pipelines requests on a socket with a small receive buffer, as many
    as the socket takes, and reads nothing: the exporter must give up on it
    (a reset within its 10 s for an answer to be taken), not block."""
    start = time.monotonic()
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    s.connect(("127.0.0.1", port))
    s.setblocking(False)
    poller = select.poll()
    poller.register(s, select.POLLERR | select.POLLHUP)
    req = b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n"
    ended = None
    while ended is None and time.monotonic() < start + 15:
        with contextlib.suppress(BlockingIOError, OSError):
            while s.send(req * 64):
                pass
        if poller.poll(50):
            ended = time.monotonic() - start
    s.close()
    out["stuck"] = ended


def test_slow_clients_do_not_hold_it_up(exporter):
    """A byte a second, and a client that takes no answer, both at once for
    12 s: scrapes meanwhile within 100 ms; the slow one gets 408 within 12 s."""
    out = {}
    threads = [threading.Thread(target=slow_client, args=(exporter.port, out)),
               threading.Thread(target=stuck_reader, args=(exporter.port, out))]
    for t in threads:
        t.start()
    took = []
    while any(t.is_alive() for t in threads):
        took.append(normal_scrape(exporter)[1])
        time.sleep(0.5)
    exporter.alive()
    got, seconds = out["slow"]
    assert got.startswith(b"HTTP/1.1 408 "), got[:100]
    assert 9 < seconds < 12.5
    assert out["stuck"] is not None, "the stuck reader's connection was not closed"
    assert max(took) < 0.1, took


def test_64k_of_headers_is_431(exporter):
    """A head of 64 KiB (one header line after another, never its end):
    431 once it is over 8 KiB, the client's later bytes read and dropped."""
    head = b"GET /metrics HTTP/1.1\r\nHost: x\r\n"
    head += b"".join(b"X-Filler-%05d: %s\r\n" % (i, b"a" * 100) for i in range(560))
    assert len(head) >= 64 * KiB
    got, _ = request(exporter.port, head)
    assert got.startswith(b"HTTP/1.1 431 "), got[:100]
    exporter.alive()
    normal_scrape(exporter)


GARBAGE_SEED = 44


def test_garbage(exporter):
    """300 clients (seed GARBAGE_SEED) send random bytes, random bytes
    after a valid request line, or a request line with a broken part, then
    end their side: each gets a 4xx answer or a close, nothing else."""
    rng = random.Random(GARBAGE_SEED)
    broken = [b"GET /metrics HTTP/1.1\r\n Host: fold\r\n\r\n", b"GET  /metrics HTTP/1.1\r\n\r\n",
              b"GET /metrics HTTP/1.1\r\nHost x\r\n\r\n", b"GET /metrics HTTP/1.1\rX\n\r\n",
              b"GET /metrics\r\n\r\n", b"GET /metrics HTTP/1.1\r\nContent-Length: -1\r\n\r\n",
              b"GET /metrics HTTP/1.1\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n",
              b"\x00GET / HTTP/1.1\r\n\r\n", b"GET /\x7f HTTP/1.1\r\n\r\n", b"\r\r\n"]
    for i in range(300):
        kind = i % 3
        if kind == 0:
            data = rng.randbytes(rng.randrange(1, 4096))
        elif kind == 1:
            data = b"GET /metrics HTTP/1.1\r\n" + rng.randbytes(rng.randrange(1, 512))
        else:
            data = rng.choice(broken)
        with socket.create_connection(("127.0.0.1", exporter.port), timeout=10) as s:
            with contextlib.suppress(OSError):
                s.sendall(data)
                s.shutdown(socket.SHUT_WR)
            got = b""
            with contextlib.suppress(ConnectionResetError):
                while chunk := s.recv(65536):
                    got += chunk
        # a random tail may end a valid head (200) or leave it open (closed)
        answers = (b"HTTP/1.1 400 ", b"HTTP/1.1 431 ") + ((b"HTTP/1.1 200 ",) if kind == 1 else ())
        assert got == b"" or got.startswith(answers), (data, got[:200])
        if kind == 2:
            assert got.startswith(b"HTTP/1.1 400 "), (data, got)
    exporter.alive()
    normal_scrape(exporter)


def test_keep_alive_pipelining_and_head(exporter):
    """HTTP/1.1 keep-alive: 50 requests on one connection (http.client);
    3 requests pipelined in one write answered in order; HEAD has GET's
    headers and no body; an HTTP/1.0 request is answered and closed."""
    conn = http.client.HTTPConnection("127.0.0.1", exporter.port, timeout=10)
    conn.connect()
    first = conn.sock
    for _ in range(50):
        conn.request("GET", "/metrics")
        response = conn.getresponse()
        body = response.read()
        assert response.status == 200 and response.getheader("Connection") is None
        parse_openmetrics(body)
    assert conn.sock is first
    conn.request("HEAD", "/metrics")
    response = conn.getresponse()
    assert response.status == 200 and response.read() == b""
    assert int(response.getheader("Content-Length")) > 1000
    conn.close()
    pipelined = (b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\nHEAD / HTTP/1.1\r\nHost: x\r\n\r\n"
                 b"GET /nope HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
    got, _ = request(exporter.port, pipelined)
    first_status, headers, rest = split_response(got)
    length = int(headers["content-length"])
    second_status, second_headers, rest = split_response(rest[length:])
    third_status, third_headers, _ = split_response(rest)
    assert (first_status, second_status, third_status) == (200, 200, 404)
    assert second_headers["content-length"] == headers["content-length"]
    assert third_headers["connection"] == "close"
    got, _ = request(exporter.port, b"GET /metrics HTTP/1.0\r\n\r\n")
    status, headers, body = split_response(got)
    assert status == 200 and headers["connection"] == "close"
    assert int(headers["content-length"]) == len(body)


@pytest.mark.parametrize("raw, status", [
    (b"GET /nope HTTP/1.1\r\nHost: x\r\n\r\n", 404),
    (b"GET /metricsfoo HTTP/1.1\r\nHost: x\r\n\r\n", 404),
    (b"GET http://x/metrics HTTP/1.1\r\nHost: x\r\n\r\n", 404),
    (b"GET /metrics?name[]=x HTTP/1.1\r\nHost: x\r\n\r\n", 200),
    (b"POST /metrics HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\n\r\nabc", 405),
    (b"DELETE / HTTP/1.1\r\nHost: x\r\n\r\n", 405),
    (b"get /metrics HTTP/1.1\r\nHost: x\r\n\r\n", 405),
    (b"GET /metrics HTTP/2.0\r\nHost: x\r\n\r\n", 505),
    (b"GET /metrics HTTP/1.1\r\nAccept: application/json\r\n\r\n", 406),
    (b"\r\n\r\nGET /metrics HTTP/1.1\r\nHost: x\r\n\r\n", 200),
])
def test_paths_methods_versions(exporter, raw, status):
    """Each answered with its status, then closed (those not kept alive by
    the test: it ends its side)."""
    with socket.create_connection(("127.0.0.1", exporter.port), timeout=10) as s:
        s.sendall(raw)
        s.shutdown(socket.SHUT_WR)
        got = b""
        while chunk := s.recv(65536):
            got += chunk
    assert split_response(got)[0] == status, got[:200]
    if status == 405:
        assert split_response(got)[1]["allow"] == "GET, HEAD"


@pytest.mark.parametrize("accept, kind", [
    (PROMETHEUS_2, "openmetrics"), (PROMETHEUS_3, "openmetrics"),
    (PROMETHEUS_TEXT_ONLY, "text"), ("text/plain", "text"), ("*/*", "openmetrics"),
    (None, "openmetrics"), ("application/openmetrics-text;q=0, */*", "text"),
])
def test_content_negotiation(exporter, accept, kind):
    """The format Prometheus' Accept headers ask for, each parsed by
    prometheus_client's parser of that format (OpenMetrics with # EOF and
    units; the 0.0.4 text without)."""
    from prometheus_client.parser import text_string_to_metric_families
    raw = b"GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n"
    if accept is not None:
        raw += b"Accept: " + accept.encode() + b"\r\n"
    got, _ = request(exporter.port, raw + b"\r\n")
    status, headers, body = split_response(got)
    assert status == 200 and headers["vary"] == "Accept"
    if kind == "openmetrics":
        assert headers["content-type"].startswith("application/openmetrics-text; version=1.0.0")
        assert body.endswith(b"# EOF\n")
        families = {f.name: f for f in parse_openmetrics(body)}
        assert families["pagetrace_cache_read_hit_ratio"].unit == "ratio"
        assert families["pagetrace_cache_hits"].type == "counter"
    else:
        assert headers["content-type"] == "text/plain; version=0.0.4; charset=utf-8"
        assert b"# EOF" not in body and b"# UNIT" not in body
        families = {f.name: f for f in text_string_to_metric_families(body.decode())}
        assert families["pagetrace_cache_hits"].type == "counter"
        assert families["pagetrace_cache_lost_events"].samples


def flood(port, seconds, rate, results):
    """@rate scrapes a second for @seconds, half on 4 kept connections, half
    on fresh ones, paced by the clock: (sent, answered 200 whole, late)."""
    req = b"GET /metrics HTTP/1.1\r\nHost: x\r\nAccept: " + PROMETHEUS_3.encode() + b"\r\n\r\n"
    kept = [socket.create_connection(("127.0.0.1", port), timeout=5) for _ in range(4)]
    sent = ok = 0
    start = time.monotonic()
    while (now := time.monotonic()) < start + seconds:
        if sent > (now - start) * rate:
            time.sleep(0.0005)
            continue
        if sent % 2:
            got = _keep_alive_scrape(kept[sent % 4], req)
        else:
            got, _ = request(port, req[:-2] + b"Connection: close\r\n\r\n")
        sent += 1
        ok += got.startswith(b"HTTP/1.1 200 ") and got.endswith(b"# EOF\n")
    for s in kept:
        s.close()
    results.update(sent=sent, ok=ok, seconds=time.monotonic() - start)


def _keep_alive_scrape(s, req):
    s.sendall(req)
    got = b""
    while b"\r\n\r\n" not in got:
        got += s.recv(65536)
    head, _, body = got.partition(b"\r\n\r\n")
    length = int(split_response(head + b"\r\n\r\n")[1]["content-length"])
    while len(body) < length:
        body += s.recv(65536)
    return head + b"\r\n\r\n" + body


def test_1000_scrapes_a_second_for_10s(exporter):
    """1,000 scrapes a second for 10 s from another process: every one
    answered whole; normal scrapes meanwhile within 100 ms."""
    code = (f"import json, sys; sys.path.insert(0, {os.path.dirname(__file__)!r}); "
            f"import test_exporter_clients as t; r = {{}}; "
            f"t.flood({exporter.port}, 10, 1000, r); print(json.dumps(r))")
    flooder = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    took = []
    time.sleep(0.5)
    while flooder.poll() is None:
        took.append(normal_scrape(exporter, limit=1.0)[1])
        time.sleep(0.2)
    result = json.loads(flooder.stdout.read())
    print(f"flood: {result}, normal scrapes meanwhile: n={len(took)}, "
          f"max {max(took) * 1000:.1f} ms")
    exporter.alive()
    assert result["sent"] >= 10000 * 0.98 and result["seconds"] < 10.5, result
    assert result["ok"] == result["sent"], result
    assert max(took) < 0.1, took


def test_counts_exact_and_intervals_kept_at_the_end(exporter, data_dir):
    """Last: a reader in the exporter's cgroup reads 1 MiB cold then warm;
    the scrape's counters went up by what the kernel says; cachestat's -j
    lines add up to the last scrape's totals; no interval slipped by more than
    10%; the connections are all closed again; SIGTERM stops it, exit 0,
    nothing on stderr but its ready line."""
    (path,) = files(data_dir, [1024 * KiB])
    before = counts(normal_scrape(exporter)[0])
    proc = reader(exporter.cgroup, [], [path, path])
    try:
        go(proc)
        # before the reader exits: its interpreter's own exit reads too
        after = counts(normal_scrape(exporter)[0])
    finally:
        finish(proc)
    time.sleep(2 * INTERVAL)
    final = counts(normal_scrape(exporter)[0])
    misses = len(cached_since_eviction(path))
    assert misses == 1024 * KiB // PAGE
    assert {k: after[k] - before[k] for k in after} == \
        {"hits": misses, "misses": misses, "dirties": 0, "lost": 0}
    deadline = time.monotonic() + 15
    while exporter.sockets() > 1 and time.monotonic() < deadline:
        time.sleep(0.5)
    assert exporter.sockets() == 1, "connections left open"
    ran = time.monotonic() - exporter.started
    exporter.proc.send_signal(signal.SIGTERM)
    assert exporter.proc.wait(timeout=30) == 0
    assert exporter.proc.stderr.read() == b"cachestat: Tracing... Hit Ctrl-C to end.\n"
    exporter.stamper.wait(timeout=30)
    stamped = [line.split(" ", 1) for line in exporter.lines.read_text().splitlines()]
    times = [float(t) for t, _ in stamped]
    samples = [json.loads(line) for _, line in stamped]
    gaps = [b - a for a, b in zip(times, times[1:-1])]  # the last one ends at SIGTERM
    print(f"intervals: n={len(gaps)}, from {min(gaps):.4f} to {max(gaps):.4f} s")
    # a sample each interval the module ran (the first comes an interval in)
    assert len(stamped) >= int(ran / INTERVAL) - 1 and len(gaps) >= 5, (len(stamped), ran)
    assert all(abs(gap - INTERVAL) <= 0.1 * INTERVAL for gap in gaps), \
        sorted(gaps)[:3] + sorted(gaps)[-3:]
    assert {k: sum(s[k] for s in samples) for k in ("hits", "misses", "dirties", "lost")} == final


def counts(families):
    by_name = {s.name: s for f in families for s in f.samples if "cgroup_id" not in s.labels}
    lost = sum(s.value for f in families for s in f.samples
               if s.name == "pagetrace_cache_lost_events_total" and "cgroup_id" not in s.labels)
    return {"hits": int(by_name["pagetrace_cache_hits_total"].value),
            "misses": int(by_name["pagetrace_cache_misses_total"].value),
            "dirties": int(by_name["pagetrace_cache_dirties_total"].value), "lost": int(lost)}
