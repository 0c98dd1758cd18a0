#!/usr/bin/env python3
"""A paced link on loopback: a TCP relay in front of one server whose answers (server to
client) share one token bucket, so every connection through it together gets at most RATE
bytes per second, as on a real link of that speed.

    python3 pacer.py --upstream 127.0.0.1:PORT --rate 50M [--port N] [--count-file FILE]

Prints one JSON line {"port": .., "pid": ..} once it listens on 127.0.0.1; SIGTERM ends it.
Requests (client to server) are relayed unpaced: they are small. With --count-file, FILE
holds the bytes carried to clients so far (rewritten as they pass; delete it to start from
0 again). Standard library only.
"""
import argparse
import json
import os
import signal
import socket
import sys
import threading
import time

CHUNK = 64 << 10


class Bucket:
    """Tokens are bytes; they refill at `rate` per second up to `burst`."""

    def __init__(self, rate, burst):
        self.rate, self.burst = rate, burst
        self.tokens, self.stamp = burst, time.monotonic()
        self.lock = threading.Lock()

    def take(self, count):
        while True:
            with self.lock:
                now = time.monotonic()
                self.tokens = min(self.burst, self.tokens + (now - self.stamp) * self.rate)
                self.stamp = now
                if self.tokens >= count:
                    self.tokens -= count
                    return
                wait = (count - self.tokens) / self.rate
            time.sleep(wait)


class Counter:
    """Bytes carried to clients, kept in a file another process reads."""

    def __init__(self, path):
        self.path, self.total, self.lock = path, 0, threading.Lock()

    def add(self, count):
        with self.lock:
            # A deleted file starts the count again.
            if not os.path.exists(self.path):
                self.total = 0
            self.total += count
            with open(self.path + ".tmp", "w") as f:
                f.write(str(self.total))
            os.replace(self.path + ".tmp", self.path)


COUNTER = None


def relay(source, sink, bucket):
    try:
        while True:
            data = source.recv(CHUNK)
            if not data:
                break
            if bucket:
                bucket.take(len(data))
            sink.sendall(data)
            if bucket and COUNTER:
                COUNTER.add(len(data))
    except OSError:
        pass
    finally:
        for sock in (sink, source):
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass


def serve(listener, upstream, bucket):
    while True:
        client, _ = listener.accept()
        try:
            server = socket.create_connection(upstream)
        except OSError:
            client.close()
            continue
        for sock in (client, server):
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        threading.Thread(target=relay, args=(client, server, None), daemon=True).start()
        threading.Thread(target=relay, args=(server, client, bucket), daemon=True).start()


def parse_rate(text):
    units = {"k": 1e3, "K": 1e3, "M": 1e6, "G": 1e9}
    return float(text[:-1]) * units[text[-1]] if text[-1] in units else float(text)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--upstream", required=True, help="HOST:PORT on loopback")
    parser.add_argument("--rate", required=True, help="bytes per second, e.g. 50M (decimal)")
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--count-file", help="keep the bytes carried to clients in this file")
    args = parser.parse_args()
    global COUNTER
    if args.count_file:
        COUNTER = Counter(args.count_file)
    host, port = args.upstream.rsplit(":", 1)
    if host not in ("127.0.0.1", "localhost"):
        sys.exit("pacer: the upstream must be on loopback")
    rate = parse_rate(args.rate)
    # A burst of 50 ms of the rate: smooth like a link, without a syscall per few bytes.
    bucket = Bucket(rate, max(CHUNK, rate / 20))
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind(("127.0.0.1", args.port))
    listener.listen(64)
    signal.signal(signal.SIGTERM, lambda *_: os._exit(0))
    print(json.dumps({"port": listener.getsockname()[1], "pid": os.getpid()}), flush=True)
    serve(listener, (host, int(port)), bucket)


if __name__ == "__main__":
    main()
