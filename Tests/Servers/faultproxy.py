#!/usr/bin/env python3
"""An HTTP/1.1 forwarding proxy that injects faults, for storebackup's transport tests.

    python3 Tests/Servers/faultproxy.py --upstream 127.0.0.1:PORT [--plan FILE]
        [--log FILE] [--port N] [--send-buffer BYTES] [--daemon --pidfile FILE]

It listens on 127.0.0.1 (a free port unless --port), forwards every request
to the one upstream over a connection of its own per client connection
(keep-alive on both sides), streams bodies both ways without buffering them
(Content-Length, chunked, or until close; Expect: 100-continue is passed
through), and leaves the request untouched, Host header included, so request
signatures (S3 SigV4) stay valid. On start it prints one JSON line:
{"port":..,"pid":..,"url":..,"upstream":..,"log":..,"control":..}.
With --daemon it prints that line once the port listens, then runs in the
background and writes its pid to --pidfile; SIGTERM ends it, SIGHUP re-reads
--plan.

THE PLAN (JSON, from --plan FILE or PUT to /__faultproxy/plan):

    {"seed": 7,
     "rules": [
       {"requests": [2, 5, 6], "fault": "500"},
       {"method": "PUT", "requests": [1], "fault": "reset", "phase": "request", "after_bytes": 65536},
       {"path_contains": "/dav/", "probability": 0.2, "fault": "429"},
       {"requests": [9], "fault": "delay", "seconds": 3}]}

A bare list is taken as the rules. Each request is tried against the rules in
order; a rule *matches* when its filters (`method`: a name or a list;
`path_contains`: a substring of the request target) all hold, and every
matching rule counts the request. The first matching rule that *fires*
applies its fault:
  - `requests`: the rule fires on these (1-based) counts of its matching
    requests. Without filters that is simply the n-th request the proxy saw
    since the plan was set (control requests are never counted).
  - `probability`: fires with this chance, drawn from random.Random(seed); one
    draw per matching request, so a sequence of requests sees the same faults
    every run.
  - neither: fires on every matching request.
  - `times`: fire at most this often (any trigger).
Faults:
  - "status" with `status` (e.g. 500), or the shorthands "500", "429", "503"
    (any 3-digit code works). 429 and 503 carry `Retry-After: 1` unless
    `retry_after` says otherwise (null: no header). `body` replaces the
    answer's text (e.g. S3's SlowDown error document). The upstream never sees
    the request. The request body is read and discarded, then the answer goes
    out and the connection stays open, except after `Expect: 100-continue`,
    where the answer goes out at once with `Connection: close`.
  - "reset": the connection to the client is reset (RST) abruptly.
    `phase` "request" (default): the upstream never sees the request; the
    proxy takes `after_bytes` of the request body (default: half the
    Content-Length, 64 KiB if chunked; a 100 Continue is sent if asked for),
    then resets. "before_response": the request goes to the upstream in full
    and is processed there, then the client is reset before any byte of the
    answer (an upload that "failed" but landed). "response": the answer's
    head and `after_bytes` of its body (default: half, or 64 KiB) reach the
    client, then the reset.
  - "delay": wait `seconds` (default 2); `phase` "request" (default) before
    forwarding, "response" after the head and `after_bytes` (default 0) of
    the body, then the rest flows.
  - "flip": the request goes to the upstream with one byte of its body
    inverted, at `after_bytes` (default: the middle; bodies with a
    Content-Length only): damage on the wire that TCP did not catch.
    With `phase` "response", the answer's body reaches the client with that
    byte inverted instead (the server's answer damaged on the way back).
  - "shift206": a ranged GET (`Range: bytes=A-B`) goes to the upstream for
    the same length `shift` bytes earlier (default 4096; later when A is
    smaller than that), and its answer reaches the client as `206 Partial
    Content` with the upstream's Content-Range and body: a consistent answer
    for another range than the one asked for.
  - "short206": the same, for the range asked with `short_by` bytes fewer at
    its end (default: half of it): a 206 whose Content-Range and body are
    consistent but shorter than the range asked for.
    (Both leave a request without a closed byte range alone; the log's
    "fault" says what was sent. rclone's S3 server answers ranges with 200:
    the proxy sends 206 either way.)
  - "strip_headers": the answer reaches the client without the headers whose
    names start with one of `headers` (a list, case-insensitive), e.g.
    ["x-amz-object-lock-"]: a server or gateway that does not show them.
  - "range200": forward; a `206 Partial Content` answer reaches the client
    as `200 OK` with its Content-Range and partial body unchanged (what
    rclone's S3 server does with every Range request).
  - "norange": forward without the request's Range header, so the upstream
    answers with the whole object (a server or cache that ignores ranges).
  - "none": forward as usual (useful to count or to shield requests from
    later rules).

TCP MODE (--tcp): for protocols the proxy cannot read (SSH, TLS). Bytes are
relayed as they are; each *connection* counts as one request (method
"CONNECT", target ""), so `requests` names connection numbers. Faults:
  - "reset" with `phase` "response" (default: after `after_bytes` bytes from
    the server reached the client, 0 = right after accepting) or "request"
    (after `after_bytes` bytes from the client reached the server).
    `until_exists` (a glob): instead of a byte count, the connection is
    reset the moment a path matching it exists, before the server's next
    bytes reach the client (an answer lost after the server acted).
  - "flip": the byte at `after_bytes` of the client's stream is inverted.
  - "none".

CONTROL (on the proxy's own port, never forwarded, never counted):
    GET  /__faultproxy/plan    the plan in force, with its counters
    PUT  /__faultproxy/plan    set a new plan (JSON body); counters restart
    GET  /__faultproxy/log     every request so far: a JSON list of the log entries
    POST /__faultproxy/clear   forget the log entries kept in memory

LOG: --log FILE gets one JSON object per line and request:
{"n", "time", "conn", "request" (the request line), "fault" (null or a
description), "status" (the status the client got, if any), "up_bytes"
(request body bytes taken from the client), "down_bytes" (response body
bytes sent to it), "error" (if something broke on the way), and, when body
bytes went that way, "up_first"/"up_last" and "down_first"/"down_last": the
times (Unix seconds) at which the first and the last of them were passed on,
so up_bytes / (up_last - up_first) is the rate the proxy saw}. Uploads are
stamped as the proxy takes them from the client, which it does as fast as the
upstream allows. Downloads are stamped as the proxy hands them to the kernel,
which buffers megabytes ahead of a slow reader: --send-buffer BYTES sets
SO_SNDBUF on the sockets toward clients, so the stamps follow the client's
reading to within that and the client's own receive buffer (a few hundred kB). Byte counts are
payload bytes for bodies that went through whole; for bodies cut short they
are bytes on the wire (chunk framing included), as is `after_bytes`. In TCP
mode the entry is the connection's, its bytes and times every byte relayed
each way (handshakes included).

Python 3 standard library only; loopback only (a non-loopback upstream is
refused).
"""

import argparse
import glob
import ipaddress
import json
import os
import random
import select
import signal
import socket
import struct
import sys
import threading
import time

CHUNK = 256 * 1024
MAX_HEAD = 64 * 1024
CONTROL_PREFIX = "/__faultproxy/"
STATUS_REASONS = {
    100: "Continue", 200: "OK", 400: "Bad Request", 404: "Not Found",
    405: "Method Not Allowed", 408: "Request Timeout", 429: "Too Many Requests",
    500: "Internal Server Error", 502: "Bad Gateway", 503: "Service Unavailable",
    504: "Gateway Timeout",
}


class Reset(Exception):
    """Raised to abandon a connection with a TCP reset."""


class PeerClosed(Exception):
    """The other side went away in the middle of a message."""


class BadMessage(Exception):
    pass


# ---------------------------------------------------------------- plan


class Rule:
    def __init__(self, spec):
        if not isinstance(spec, dict):
            raise ValueError("a rule must be an object: %r" % (spec,))
        self.spec = spec
        fault = str(spec.get("fault", "none"))
        self.status = None
        if fault.isdigit() and len(fault) == 3:
            self.status, fault = int(fault), "status"
        elif fault == "status":
            self.status = int(spec.get("status", 500))
        if fault not in ("status", "reset", "delay", "flip", "range200", "norange", "shift206", "short206",
                         "strip_headers", "none"):
            raise ValueError("unknown fault %r" % fault)
        self.fault = fault
        # `body`: the answer's text instead of the default one (S3's
        # <Error><Code>SlowDown</Code>…</Error>, say), for a "status" fault.
        self.body = spec["body"].encode() if isinstance(spec.get("body"), str) else None
        if "retry_after" in spec:
            ra = spec["retry_after"]
            self.retry_after = None if ra is None else str(ra)
        else:
            self.retry_after = "1" if self.status in (429, 503) else None
        self.phase = spec.get("phase", "request")
        valid = {"reset": ("request", "before_response", "response"),
                 "delay": ("request", "response"),
                 "flip": ("request", "response")}.get(fault, (self.phase,))
        if self.phase not in valid:
            raise ValueError("fault %s has no phase %r" % (fault, self.phase))
        self.after_bytes = spec.get("after_bytes")
        self.seconds = float(spec.get("seconds", 2))
        self.shift = int(spec.get("shift", 4096))
        self.short_by = spec.get("short_by")
        self.strip = [str(h).lower() for h in spec.get("headers", [])]
        if fault == "strip_headers" and not self.strip:
            raise ValueError("fault strip_headers needs \"headers\" (name prefixes)")
        methods = spec.get("method")
        self.methods = None if methods is None else (
            {methods.upper()} if isinstance(methods, str) else {m.upper() for m in methods})
        self.path_contains = spec.get("path_contains")
        self.until_exists = spec.get("until_exists")
        self.requests = set(int(n) for n in spec.get("requests", []))
        self.probability = spec.get("probability")
        self.times = spec.get("times")
        self.seen = 0
        self.fired = 0
        self.triggered = 0

    def matches(self, method, target):
        if self.methods is not None and method.upper() not in self.methods:
            return False
        if self.path_contains is not None and self.path_contains not in target:
            return False
        return True

    def describe(self):
        if self.fault == "status":
            d = "status %d" % self.status
            if self.retry_after is not None:
                d += " retry-after %s" % self.retry_after
            return d
        if self.fault == "reset":
            return "reset %s" % self.phase
        if self.fault == "delay":
            return "delay %s %gs" % (self.phase, self.seconds)
        if self.fault == "flip":
            return "flip %s" % self.phase
        if self.fault in ("range200", "norange", "shift206", "short206", "strip_headers"):
            return self.fault
        return "none"


class Plan:
    def __init__(self, spec=None):
        spec = {"rules": []} if spec is None else spec
        if isinstance(spec, list):
            spec = {"rules": spec}
        if not isinstance(spec, dict):
            raise ValueError("a plan is an object with \"rules\", or a list of rules")
        self.spec = spec
        self.rules = [Rule(r) for r in spec.get("rules", [])]
        self.rng = random.Random(spec.get("seed", 0))
        self.count = 0
        self.lock = threading.Lock()

    def decide(self, method, target):
        """Count one request; returns (n, the rule that fires or None)."""
        with self.lock:
            self.count += 1
            chosen = None
            for rule in self.rules:
                if rule.until_exists or not rule.matches(method, target):
                    continue  # until_exists rules are watched by the TCP relay itself
                rule.seen += 1
                if rule.probability is not None:
                    fires = self.rng.random() < float(rule.probability)
                    if rule.requests:
                        fires = fires or rule.seen in rule.requests
                elif rule.requests:
                    fires = rule.seen in rule.requests
                else:
                    fires = True
                if rule.times is not None and rule.fired >= int(rule.times):
                    fires = False
                if fires and chosen is None:
                    rule.fired += 1
                    chosen = rule
            return self.count, chosen

    def state(self):
        with self.lock:
            return {"plan": self.spec, "requests": self.count,
                    "rules": [{"seen": r.seen, "fired": r.fired} for r in self.rules]}


# ---------------------------------------------------------------- HTTP plumbing


class Head:
    """A request or response head: the raw bytes, the first line, the headers."""

    def __init__(self, raw):
        self.raw = raw
        lines = raw.decode("latin-1").split("\r\n")
        self.first = lines[0]
        self.headers = []
        for line in lines[1:]:
            if not line:
                continue
            if line[0] in " \t" and self.headers:  # obsolete line folding
                name, value = self.headers[-1]
                self.headers[-1] = (name, value + " " + line.strip())
                continue
            name, sep, value = line.partition(":")
            if not sep:
                raise BadMessage("bad header line %r" % line)
            self.headers.append((name.strip().lower(), value.strip()))

    def get(self, name):
        values = [v for n, v in self.headers if n == name]
        return ", ".join(values) if values else None

    def tokens(self, name):
        v = self.get(name)
        return [t.strip().lower() for t in v.split(",")] if v else []

    def body_kind(self):
        """('chunked', None), ('length', n) or ('none', 0) for a request."""
        te = self.tokens("transfer-encoding")
        if te:
            if te[-1] != "chunked":
                raise BadMessage("unsupported Transfer-Encoding %r" % te)
            return "chunked", None
        cl = self.get("content-length")
        if cl is not None:
            try:
                n = int(cl.split(",")[0].strip())
            except ValueError:
                raise BadMessage("bad Content-Length %r" % cl)
            if n < 0:
                raise BadMessage("bad Content-Length %r" % cl)
            return "length", n
        return "none", 0


def read_head(f, first_line_optional=False):
    """Read a message head from F; None on a clean EOF before its first byte."""
    raw = b""
    while True:
        line = f.readline(MAX_HEAD + 1)
        if not line:
            if raw or not first_line_optional:
                raise PeerClosed("connection closed inside a message head")
            return None
        if not raw and line in (b"\r\n", b"\n"):
            continue  # stray CRLF between messages (RFC 9112 2.2)
        raw += line
        if len(raw) > MAX_HEAD:
            raise BadMessage("message head too long")
        if line in (b"\r\n", b"\n"):
            return Head(raw)


class Sink:
    """Where body bytes go: a socket (or nowhere), counted, with an optional budget.

    When the budget is used up, on_budget() runs: it raises Reset, or sleeps
    and lifts the budget. Once stamping() a log entry, each write that passed
    bytes on marks the entry's `<direction>_first` (once) and `<direction>_last`."""

    def __init__(self, sock, budget=None, on_budget=None):
        self.sock = sock
        self.sent = 0
        self.budget = budget
        self.on_budget = on_budget
        self.entry = None
        self.direction = None

    def stamping(self, entry, direction):
        self.entry, self.direction = entry, direction
        return self

    def write(self, data):
        while data:
            if self.budget is not None:
                room = self.budget - self.sent
                if room <= 0:
                    self.budget_reached()
                    continue
                part, data = data[:room], data[room:]
            else:
                part, data = data, b""
            if self.sock is not None:
                self.sock.sendall(part)
            self.sent += len(part)
            if self.entry is not None and part:
                stamp(self.entry, self.direction)
            if self.budget is not None and self.sent >= self.budget:
                self.budget_reached()

    def budget_reached(self):
        handler, self.on_budget, self.budget = self.on_budget, None, None
        if handler is not None:
            handler()


def stamp(entry, direction):
    """Marks in ENTRY that bytes went DIRECTION ("up": from the client, "down": to it) now."""
    now = round(time.time(), 4)
    entry.setdefault(direction + "_first", now)
    entry[direction + "_last"] = now


class FlipSink(Sink):
    """A Sink that inverts the byte at offset AT of what passes through."""

    def __init__(self, sock, at):
        Sink.__init__(self, sock)
        self.at = at

    def write(self, data):
        if self.sent <= self.at < self.sent + len(data):
            i = self.at - self.sent
            data = data[:i] + bytes([data[i] ^ 0xFF]) + data[i + 1:]
        Sink.write(self, data)


def read_some(f, n):
    data = f.read1(n)
    if not data:
        raise PeerClosed("connection closed inside a message body")
    return data


def relay_body(f, sink, kind, length):
    """Copy one message body from F to SINK, keeping its framing; returns body bytes."""
    body = 0
    if kind == "length":
        left = length
        while left > 0:
            data = read_some(f, min(CHUNK, left))
            left -= len(data)
            body += len(data)
            sink.write(data)
    elif kind == "chunked":
        while True:
            line = f.readline(4096)
            if not line.endswith(b"\n"):
                raise PeerClosed("bad or cut chunk size line")
            try:
                size = int(line.split(b";")[0].strip(), 16)
            except ValueError:
                raise BadMessage("bad chunk size line %r" % line)
            sink.write(line)
            if size == 0:
                while True:  # trailers, then the final CRLF
                    line = f.readline(MAX_HEAD)
                    if not line.endswith(b"\n"):
                        raise PeerClosed("cut chunked trailer")
                    sink.write(line)
                    if line in (b"\r\n", b"\n"):
                        return body
            left = size + 2  # the data and its CRLF
            while left > 0:
                data = read_some(f, min(CHUNK, left))
                left -= len(data)
                sink.write(data)
            body += size
    elif kind == "close":
        while True:
            data = f.read1(CHUNK)
            if not data:
                return body
            body += len(data)
            sink.write(data)
    return body


def rst_close(sock):
    """Close SOCK with a TCP reset instead of an orderly FIN."""
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    except OSError:
        pass
    try:
        sock.close()
    except OSError:
        pass


def lingering_close(sock, f, seconds=2.0):
    """Half-close, then swallow what the peer still sends (briefly) so that
    our answer is not lost to an RST caused by unread data."""
    try:
        sock.shutdown(socket.SHUT_WR)
        deadline = time.monotonic() + seconds
        sock.settimeout(0.2)
        while time.monotonic() < deadline:
            try:
                if not sock.recv(CHUNK):
                    break
            except socket.timeout:
                continue
    except OSError:
        pass
    finally:
        try:
            f.close()
        except OSError:
            pass
        try:
            sock.close()
        except OSError:
            pass


def simple_response(status, body=b"", headers=(), close=False):
    reason = STATUS_REASONS.get(status, "Injected")
    lines = ["HTTP/1.1 %d %s" % (status, reason),
             "Content-Type: text/plain; charset=utf-8",
             "Content-Length: %d" % len(body)]
    lines += ["%s: %s" % h for h in headers]
    if close:
        lines.append("Connection: close")
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + body


def response_has_body(method, status):
    return not (method == "HEAD" or 100 <= status < 200 or status in (204, 304))


def parse_status(head):
    parts = head.first.split(" ", 2)
    if len(parts) < 2 or not parts[0].startswith("HTTP/") or not parts[1].isdigit():
        raise BadMessage("bad status line %r" % head.first)
    return parts[0], int(parts[1])


def closed_range(head):
    """(A, B) of a request's `Range: bytes=A-B`, or None for any other Range or none."""
    value = head.get("range")
    if value is None or not value.startswith("bytes="):
        return None
    first, sep, last = value[len("bytes="):].partition("-")
    if not sep or not first.strip().isdigit() or not last.strip().isdigit():
        return None
    return int(first), int(last)


def rewrite_head(head, drop=(), first=None, add=()):
    """HEAD with the headers whose names start with a prefix in DROP removed, its first
    line replaced by FIRST (if given) and the (name, value) pairs in ADD appended; the
    other lines are kept as they came."""
    lines = head.raw.decode("latin-1").split("\r\n")
    kept = [first if first is not None else lines[0]]
    for line in lines[1:]:
        if not line:
            continue
        name = line.partition(":")[0].strip().lower()
        if not any(name.startswith(prefix) for prefix in drop):
            kept.append(line)
    kept += ["%s: %s" % pair for pair in add]
    return Head(("\r\n".join(kept) + "\r\n\r\n").encode("latin-1"))


# ---------------------------------------------------------------- the proxy


class Proxy:
    def __init__(self, upstream, plan, logpath, timeout, send_buffer=None):
        self.upstream = upstream
        self.send_buffer = send_buffer
        self.plan = plan
        self.plan_lock = threading.Lock()
        self.logpath = logpath
        self.logfile = open(logpath, "a", buffering=1) if logpath else None
        self.log_lock = threading.Lock()
        self.entries = []
        self.timeout = timeout
        self.conn_ids = 0

    # -- bookkeeping

    def set_plan(self, plan):
        with self.plan_lock:
            self.plan = plan

    def current_plan(self):
        with self.plan_lock:
            return self.plan

    def record(self, entry):
        entry["time"] = round(time.time(), 4)
        line = json.dumps(entry)
        with self.log_lock:
            if len(self.entries) < 100000:
                self.entries.append(entry)
            if self.logfile:
                self.logfile.write(line + "\n")

    # -- connections

    def serve(self, listener):
        while True:
            try:
                csock, _ = listener.accept()
            except OSError:
                continue
            self.conn_ids += 1
            if self.send_buffer:
                try:
                    csock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, self.send_buffer)
                except OSError:
                    pass
            t = threading.Thread(target=self.handle_connection, args=(csock, self.conn_ids),
                                 daemon=True)
            t.start()

    def connect_upstream(self):
        host, port = self.upstream
        s = socket.create_connection((host, port), timeout=self.timeout)
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        return s, s.makefile("rb", buffering=CHUNK)

    def handle_connection(self, csock, conn_id):
        csock.settimeout(self.timeout)
        csock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        cf = csock.makefile("rb", buffering=CHUNK)
        state = {"up": None}  # (sock, file) of the upstream connection
        how = "close"
        try:
            while True:
                how = self.handle_request(csock, cf, state, conn_id)
                if how != "keep":
                    break
        except Exception as e:  # a connection's trouble never ends the proxy
            how = "close"
            self.record({"conn": conn_id, "error": "%s: %s" % (type(e).__name__, e)})
        finally:
            self.close_upstream(state)
            if how == "reset":
                try:
                    cf.close()
                except OSError:
                    pass
                rst_close(csock)
            elif how == "linger":
                lingering_close(csock, cf)
            else:
                try:
                    cf.close()
                    csock.close()
                except OSError:
                    pass

    @staticmethod
    def close_upstream(state):
        up = state.get("up")
        state["up"] = None
        if up:
            for x in (up[1], up[0]):
                try:
                    x.close()
                except OSError:
                    pass

    def upstream_for(self, state):
        up = state.get("up")
        if up is not None:
            # An idle keep-alive connection the upstream closed reads as EOF.
            readable, _, _ = select.select([up[0]], [], [], 0)
            if readable:
                self.close_upstream(state)
                up = None
        if up is None:
            up = self.connect_upstream()
            state["up"] = up
        return up

    # -- one request

    def handle_request(self, csock, cf, state, conn_id):
        """Handle one request; returns 'keep', 'close', 'linger' or 'reset'."""
        try:
            head = read_head(cf, first_line_optional=True)
        except (PeerClosed, socket.timeout, ConnectionError):
            return "close"
        if head is None:
            return "close"
        parts = head.first.split(" ")
        if len(parts) != 3 or not parts[2].startswith("HTTP/"):
            csock.sendall(simple_response(400, b"bad request line\n", close=True))
            return "linger"
        method, target, version = parts
        client_close = ("close" in head.tokens("connection")
                        or (version == "HTTP/1.0"
                            and "keep-alive" not in head.tokens("connection")))
        kind, length = head.body_kind()
        expect100 = "100-continue" in head.tokens("expect")

        if target.startswith(CONTROL_PREFIX):
            return self.control(csock, cf, method, target, kind, length, expect100, client_close)

        n, rule = self.current_plan().decide(method, target)
        entry = {"n": n, "conn": conn_id, "request": head.first, "fault": None, "started": round(time.time(), 4),
                 "status": None, "up_bytes": 0, "down_bytes": 0}
        if rule is not None and rule.fault != "none":
            entry["fault"] = rule.describe()
        fault = rule.fault if rule is not None else "none"
        phase = rule.phase if rule is not None else None

        # Faults that never reach the upstream.
        if fault == "status":
            headers = []
            if rule.retry_after is not None:
                headers.append(("Retry-After", rule.retry_after))
            body = rule.body if rule.body is not None else ("injected fault: %s\n" % rule.describe()).encode()
            entry["status"] = rule.status
            if expect100 and kind != "none":
                # Answer before the body comes; the client may or may not
                # send it, so this connection cannot be reused.
                self.record(entry)
                csock.sendall(simple_response(rule.status, body, headers, close=True))
                return "linger"
            entry["up_bytes"] = relay_body(cf, Sink(None).stamping(entry, "up"), kind, length)
            self.record(entry)
            csock.sendall(simple_response(rule.status, body, headers, close=client_close))
            return "close" if client_close else "keep"
        if fault == "reset" and phase == "request":
            budget = rule.after_bytes
            if budget is None:
                budget = length // 2 if kind == "length" else (65536 if kind == "chunked" else 0)
            entry["fault"] = "reset request after %d body bytes" % budget
            if budget > 0 and kind != "none":
                if expect100:
                    csock.sendall(b"HTTP/1.1 100 Continue\r\n\r\n")
                sink = Sink(None, budget, on_budget=self.raise_reset).stamping(entry, "up")
                try:
                    relay_body(cf, sink, kind, length)
                except Reset:
                    pass
                entry["up_bytes"] = sink.sent
            self.record(entry)
            return "reset"
        if fault == "delay" and phase == "request":
            time.sleep(rule.seconds)

        if fault == "norange" and head.get("range") is not None:
            lines = head.raw.decode("latin-1").split("\r\n")
            head = Head("\r\n".join(l for l in lines if not l.lower().startswith("range:")).encode("latin-1"))
            entry["fault"] = "norange (Range removed)"

        if fault in ("shift206", "short206"):
            asked = closed_range(head)
            if asked is None:
                entry["fault"] = "%s (no closed Range: forwarded as is)" % fault
                fault = "none"
            else:
                first, last = asked
                if fault == "shift206":
                    delta = -rule.shift if first >= rule.shift else rule.shift
                    sent = (first + delta, last + delta)
                else:
                    short_by = rule.short_by if rule.short_by is not None else (last - first + 1) // 2
                    sent = (first, last - max(1, min(int(short_by), last - first)))
                head = rewrite_head(head, drop=("range",), add=[("Range", "bytes=%d-%d" % sent)])
                entry["fault"] = "%s (bytes=%d-%d asked, bytes=%d-%d sent)" % ((fault,) + asked + sent)

        # Forward to the upstream.
        try:
            usock, uf = self.upstream_for(state)
            usock.sendall(head.raw)
        except OSError as e:
            self.close_upstream(state)
            entry["status"] = 502
            entry["error"] = "upstream: %s" % e
            self.record(entry)
            if kind == "none":
                csock.sendall(simple_response(502, b"upstream unreachable\n", close=client_close))
                return "close" if client_close else "keep"
            csock.sendall(simple_response(502, b"upstream unreachable\n", close=True))
            return "linger"

        send_body = kind != "none"
        client_must_close = False
        response = None
        if send_body and expect100:
            # Let the upstream decide: 100 Continue (relayed) or a final answer.
            while True:
                response = read_head(uf)
                _, status = parse_status(response)
                if status == 100:
                    csock.sendall(response.raw)
                    response = None
                    break
                if 100 < status < 200:
                    csock.sendall(response.raw)
                    continue
                send_body = False  # final answer without 100: no body will be read
                client_must_close = True
                break
        if send_body:
            sink = Sink(usock)
            if fault == "flip" and phase == "request" and kind == "length" and length > 0:
                at = rule.after_bytes if rule.after_bytes is not None else length // 2
                sink = FlipSink(usock, min(int(at), length - 1))
                entry["fault"] = "flip request body byte %d" % sink.at
            sink.stamping(entry, "up")
            try:
                entry["up_bytes"] = relay_body(cf, sink, kind, length)
            except (BrokenPipeError, ConnectionResetError) as e:
                # The upstream stopped reading; its answer may still be there.
                entry["error"] = "upstream stopped reading the body: %s" % e
                entry["up_bytes"] = sink.sent
                client_must_close = True
            except (PeerClosed, socket.timeout) as e:
                entry["error"] = "client: %s: %s" % (type(e).__name__, e)
                entry["up_bytes"] = sink.sent
                self.close_upstream(state)
                self.record(entry)
                return "close"

        # The answer: skip/relay interim 1xx, then the final head and body.
        while response is None:
            response = read_head(uf)
            _, status = parse_status(response)
            if 100 <= status < 200:
                if status != 100 or expect100:
                    csock.sendall(response.raw)
                response = None
        uversion, status = parse_status(response)
        if fault == "range200" and status == 206:
            response = Head(response.raw.replace(response.first.encode("latin-1"),
                                                 (uversion + " 200 OK").encode("latin-1"), 1))
            status = 200
            entry["fault"] = "range200 (206 sent as 200)"
        if fault in ("shift206", "short206") and status == 200 and response.get("content-range") is not None:
            # rclone's S3 answers a range with 200: the fault is a 206 all the same.
            response = rewrite_head(response, first=uversion + " 206 Partial Content")
            status = 206
        if fault in ("shift206", "short206") and status != 206:
            entry["fault"] += " (upstream answered %d: sent as is)" % status
        if fault == "strip_headers":
            removed = sorted({n for n, _ in response.headers if any(n.startswith(p) for p in rule.strip)})
            response = rewrite_head(response, drop=rule.strip)
            entry["fault"] = "strip_headers (%s)" % (", ".join(removed) if removed else "none present")
        entry["status"] = status
        upstream_close = ("close" in response.tokens("connection")
                          or (uversion == "HTTP/1.0"
                              and "keep-alive" not in response.tokens("connection")))
        if response_has_body(method, status):
            rkind, rlength = response.body_kind()
            if rkind == "none":
                rkind, rlength = "close", None
                upstream_close = True
        else:
            rkind, rlength = "none", 0

        if fault == "reset" and phase == "before_response":
            entry["fault"] = "reset before response (upstream answered %d)" % status
            self.close_upstream(state)
            self.record(entry)
            return "reset"

        sink = Sink(csock)
        if fault == "reset" and phase == "response":
            budget = rule.after_bytes
            if budget is None:
                budget = rlength // 2 if rkind == "length" else 65536
            entry["fault"] = "reset response after %d body bytes" % budget
            entry["status"] = status
            sink = Sink(csock, budget, on_budget=self.raise_reset)
        elif fault == "delay" and phase == "response":
            budget = rule.after_bytes or 0
            seconds = rule.seconds
            sink = Sink(csock, budget, on_budget=lambda: time.sleep(seconds))
        elif fault == "flip" and phase == "response":
            if rkind == "length" and rlength > 0:
                at = rule.after_bytes if rule.after_bytes is not None else rlength // 2
                sink = FlipSink(csock, min(int(at), rlength - 1))
                entry["fault"] = "flip response body byte %d" % sink.at
            else:
                entry["fault"] = "flip response (no body with a Content-Length: sent as is)"
        sink.stamping(entry, "down")

        try:
            csock.sendall(response.raw)
            if sink.budget == 0:
                sink.budget_reached()
            entry["down_bytes"] = relay_body(uf, sink, rkind, rlength)
        except Reset:
            entry["down_bytes"] = sink.sent
            self.close_upstream(state)
            self.record(entry)
            return "reset"
        except (PeerClosed, OSError) as e:
            entry["down_bytes"] = sink.sent
            entry["error"] = "%s: %s" % (type(e).__name__, e)
            self.close_upstream(state)
            self.record(entry)
            return "close"
        if fault == "reset" and phase == "response":
            # The whole body fitted in the budget: reset after it anyway.
            entry["fault"] += " (body complete)"
            self.close_upstream(state)
            self.record(entry)
            return "reset"
        self.record(entry)
        if upstream_close or client_must_close:
            self.close_upstream(state)
        if client_must_close:
            return "linger"
        if upstream_close or client_close:
            return "close"
        return "keep"

    @staticmethod
    def raise_reset():
        raise Reset()

    # -- control endpoint

    def control(self, csock, cf, method, target, kind, length, expect100, client_close):
        if expect100 and kind != "none":
            csock.sendall(b"HTTP/1.1 100 Continue\r\n\r\n")
        buf = bytearray()

        class Collect:
            sent = 0

            def write(self, data):
                if len(buf) + len(data) > 16 * 1024 * 1024:
                    raise BadMessage("control body too large")
                buf.extend(data)

        relay_body(cf, Collect(), kind, length)
        body = bytes(buf)
        if kind == "chunked":
            body = dechunk(body)
        what = target[len(CONTROL_PREFIX):].split("?")[0]
        status, answer = 200, None
        try:
            if what == "plan" and method == "GET":
                answer = self.current_plan().state()
            elif what == "plan" and method in ("PUT", "POST"):
                self.set_plan(Plan(json.loads(body.decode() or "null")))
                answer = self.current_plan().state()
            elif what == "log" and method == "GET":
                with self.log_lock:
                    answer = list(self.entries)
            elif what == "clear" and method == "POST":
                with self.log_lock:
                    self.entries.clear()
                answer = {"cleared": True}
            else:
                status, answer = 404, {"error": "unknown control %s %s" % (method, what)}
        except (ValueError, TypeError) as e:
            status, answer = 400, {"error": str(e)}
        data = (json.dumps(answer) + "\n").encode()
        csock.sendall(simple_response(status, data, [("X-Faultproxy", "control")],
                                      close=client_close).replace(
            b"text/plain; charset=utf-8", b"application/json"))
        return "close" if client_close else "keep"


class TcpProxy(Proxy):
    """Relays raw bytes (SSH, TLS) with connection-level faults; see TCP MODE."""

    def handle_connection(self, csock, conn_id):
        plan = self.current_plan()
        n, rule = plan.decide("CONNECT", "")
        if rule is not None and rule.times is not None:
            # `times` counts faults that really happened (a byte budget a connection never
            # reaches is no fault): claimed when the fault strikes.
            with plan.lock:
                rule.fired -= 1
        entry = {"n": n, "conn": conn_id, "request": "CONNECT", "fault": None,
                 "status": None, "up_bytes": 0, "down_bytes": 0}
        fault = rule.fault if rule is not None else "none"
        if fault not in ("none", "reset", "flip"):
            fault = "none"
        # entry["fault"] is set when a fault strikes, not when a rule merely applies.
        limit = {"request": None, "response": None}
        flip_at = None
        watch = next((r for r in plan.rules if r.until_exists), None)
        if fault == "reset":
            phase = rule.spec.get("phase", "response")  # TCP mode: server bytes by default
            limit["request" if phase == "request" else "response"] = int(rule.after_bytes or 0)
        if fault == "flip":
            flip_at = int(rule.after_bytes or 0)
        try:
            if limit["response"] == 0 and self.claim(plan, rule):
                return self.finish(entry, csock, None, "reset after 0 server bytes")
            try:
                usock = socket.create_connection(self.upstream, timeout=self.timeout)
            except OSError as e:
                entry["error"] = "upstream: %s" % e
                return self.finish(entry, csock, None, None)
            # Bytes go on as they come: Nagle's wait for an ACK (delayed up to 40 ms) on
            # each small packet would slow SFTP's request-and-status exchange to a crawl.
            for s in (csock, usock):
                s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            socks = [csock, usock]
            counts = {"up": 0, "down": 0}
            while True:
                readable, _, _ = select.select(socks, [], [], self.timeout)
                if not readable:
                    return self.finish(entry, csock, usock, None, error="idle timeout")
                for s in readable:
                    try:
                        data = s.recv(CHUNK)
                    except OSError:
                        data = b""
                    if not data:
                        return self.finish(entry, csock, usock, None)
                    if s is csock:
                        direction, target, cap = "up", usock, limit["request"]
                        if (flip_at is not None and counts["up"] <= flip_at < counts["up"] + len(data)
                                and self.claim(plan, rule)):
                            i = flip_at - counts["up"]
                            data = data[:i] + bytes([data[i] ^ 0xFF]) + data[i + 1:]
                            entry["fault"] = "flip client byte %d" % flip_at
                    else:
                        direction, target, cap = "down", csock, limit["response"]
                        if watch is not None and glob.glob(watch.until_exists):
                            with plan.lock:
                                fire = watch.times is None or watch.triggered < int(watch.times)
                                if fire:
                                    watch.triggered += 1
                            if fire:
                                entry["down_bytes"] = counts["down"]
                                return self.finish(entry, csock, usock,
                                                   "reset: %s exists" % watch.until_exists)
                            watch = None
                    if (cap is not None and counts[direction] + len(data) >= cap
                            and self.claim(plan, rule)):
                        data = data[:cap - counts[direction]]
                        try:
                            target.sendall(data)
                        except OSError:
                            pass
                        if data:
                            stamp(entry, direction)
                        counts[direction] += len(data)
                        entry["up_bytes"], entry["down_bytes"] = counts["up"], counts["down"]
                        return self.finish(entry, csock, usock,
                                           "reset after %d %s bytes" % (cap, "client" if direction == "up" else "server"))
                    try:
                        target.sendall(data)
                    except OSError:
                        return self.finish(entry, csock, usock, None)
                    stamp(entry, direction)
                    counts[direction] += len(data)
                    entry["up_bytes"], entry["down_bytes"] = counts["up"], counts["down"]
        except Exception as e:  # a connection's trouble never ends the proxy
            entry["error"] = "%s: %s" % (type(e).__name__, e)
            self.finish(entry, csock, None, None)

    @staticmethod
    def claim(plan, rule):
        """Whether RULE may strike now (its `times` not used up); counts the strike."""
        with plan.lock:
            if rule.times is not None and rule.fired >= int(rule.times):
                return False
            if rule.times is not None:
                rule.fired += 1
            return True

    def finish(self, entry, csock, usock, reset, error=None):
        if reset:
            entry["fault"] = reset
        if error:
            entry["error"] = error
        self.record(entry)
        if usock is not None:
            try:
                usock.close()
            except OSError:
                pass
        if reset:
            rst_close(csock)
        else:
            try:
                csock.close()
            except OSError:
                pass


def dechunk(raw):
    out, i = bytearray(), 0
    while True:
        j = raw.index(b"\r\n", i)
        size = int(raw[i:j].split(b";")[0], 16)
        if size == 0:
            return bytes(out)
        out += raw[j + 2:j + 2 + size]
        i = j + 2 + size + 2


# ---------------------------------------------------------------- main


def loopback_upstream(text):
    host, sep, port = text.rpartition(":")
    if not sep or not port.isdigit():
        raise argparse.ArgumentTypeError("--upstream wants HOST:PORT, e.g. 127.0.0.1:8080")
    host = host.strip("[]")
    if host == "localhost":
        host = "127.0.0.1"
    try:
        if not ipaddress.ip_address(host).is_loopback:
            raise ValueError
    except ValueError:
        raise argparse.ArgumentTypeError("--upstream must be a loopback address, not %r" % host)
    return host, int(port)


def load_plan(path):
    if not path:
        return Plan()
    with open(path) as f:
        return Plan(json.load(f))


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter,
                                epilog="See the top of this file for the plan format.")
    p.add_argument("--upstream", required=True, type=loopback_upstream, help="HOST:PORT")
    p.add_argument("--plan", help="JSON fault plan file")
    p.add_argument("--log", help="append one JSON line per request here")
    p.add_argument("--port", type=int, default=0, help="port on 127.0.0.1 (default: a free one)")
    p.add_argument("--timeout", type=float, default=300.0,
                   help="seconds of silence before a connection is dropped")
    p.add_argument("--tcp", action="store_true", help="relay raw bytes (SSH, TLS); see TCP MODE")
    p.add_argument("--send-buffer", type=int,
                   help="SO_SNDBUF of the sockets toward clients, so that download times follow the client")
    p.add_argument("--daemon", action="store_true", help="run in the background")
    p.add_argument("--pidfile", help="write the pid here (needed with --daemon)")
    args = p.parse_args(argv)
    if args.daemon and not args.pidfile:
        p.error("--daemon needs --pidfile")
    try:
        plan = load_plan(args.plan)
    except (OSError, ValueError) as e:
        p.error("bad plan: %s" % e)
    logpath = os.path.abspath(args.log) if args.log else None
    pidfile = os.path.abspath(args.pidfile) if args.pidfile else None

    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind(("127.0.0.1", args.port))
    listener.listen(128)
    port = listener.getsockname()[1]
    info = {"port": port, "url": "http://127.0.0.1:%d" % port,
            "upstream": "%s:%d" % args.upstream, "log": logpath,
            "control": "http://127.0.0.1:%d%s" % (port, CONTROL_PREFIX)}

    if args.daemon:
        # The listener is bound before the fork: connections queue from now on,
        # so the caller may connect as soon as it has read our line.
        pid = os.fork()
        if pid > 0:
            with open(pidfile, "w") as f:
                f.write("%d\n" % pid)
            info["pid"] = pid
            sys.stdout.write(json.dumps(info) + "\n")
            sys.stdout.flush()
            os._exit(0)
        os.setsid()
        devnull = os.open(os.devnull, os.O_RDWR)
        for fd in (0, 1, 2):
            os.dup2(devnull, fd)
        if logpath:
            err = os.open(logpath + ".stderr", os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
            os.dup2(err, 2)
    else:
        info["pid"] = os.getpid()
        if pidfile:
            with open(pidfile, "w") as f:
                f.write("%d\n" % os.getpid())
        sys.stdout.write(json.dumps(info) + "\n")
        sys.stdout.flush()

    proxy = (TcpProxy if args.tcp else Proxy)(args.upstream, plan, logpath, args.timeout, args.send_buffer)

    def on_term(signum, frame):
        if pidfile:
            try:
                with open(pidfile) as f:
                    if int(f.read().split()[0]) == os.getpid():
                        os.unlink(pidfile)
            except (OSError, ValueError, IndexError):
                pass
        os._exit(0)

    def on_hup(signum, frame):
        try:
            proxy.set_plan(load_plan(args.plan))
        except (OSError, ValueError) as e:
            sys.stderr.write("faultproxy: plan not reloaded: %s\n" % e)

    # A parent may have started us with these signals blocked (the mask survives exec):
    # unblock them, or `stop` waits for its SIGKILL.
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGTERM, signal.SIGINT, signal.SIGHUP})
    signal.signal(signal.SIGTERM, on_term)
    signal.signal(signal.SIGINT, on_term)
    signal.signal(signal.SIGHUP, on_hup)
    proxy.serve(listener)


if __name__ == "__main__":
    main()
