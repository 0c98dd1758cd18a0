#!/usr/bin/env python3
"""How closely `--limit-upload` holds its rate (issue 36's target: `--limit-upload 20M`
within 10 % of 20 MB/s), against rclone's S3 server on loopback.

    python3 scripts/bench_lib/ratelimit.py [--binary PATH] [--size-mb N] [--rate 20M] [--runs N]

Makes one archive of N MiB of random data (default 200) in a local folder, then uploads
it with `storebackup copy` (no archiving) to S3 through the fault proxy without faults,
`--runs` times, and prints each run's rate on the wire (the PUT bodies' bytes over the
span from the first PUT's start to the last one's end, from the proxy's log) and the
median's deviation from the cap.
S3 multipart upload runs 4 parts in parallel: the cap is the total across them.
"""
import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from s3server import s3_env, start_proxy, start_s3, stop_servers  # noqa: E402

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def parse_rate(text):
    units = {"k": 1e3, "K": 1e3, "M": 1e6, "G": 1e9}
    return float(text[:-1]) * units[text[-1]] if text[-1] in units else float(text)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--binary", default=os.path.join(REPO, ".build", "debug", "storebackup"))
    parser.add_argument("--size-mb", type=int, default=200)
    parser.add_argument("--rate", default="20M")
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    rate = parse_rate(args.rate)
    work = tempfile.mkdtemp(prefix="sb-ratelimit-")
    root = os.path.join(work, "s3")
    os.makedirs(root)
    server = start_s3(root)
    try:
        env = s3_env(server, HOME=work)
        store = os.path.join(work, "Stores")
        os.makedirs(os.path.join(store, ".App_SUPPORT"))
        subprocess.run(["sqlite3", os.path.join(store, "App.sqlite"), "CREATE TABLE t(x); INSERT INTO t VALUES (1);"], check=True)
        with open(os.path.join(store, ".App_SUPPORT", "random.bin"), "wb") as out:
            for _ in range(args.size_mb):
                out.write(os.urandom(1 << 20))
        local = os.path.join(work, "local")
        subprocess.run([args.binary, "create", store, "--to", local], check=True, env=env, stdout=subprocess.DEVNULL)
        archive = [n for n in os.listdir(local) if n.endswith(".zip")][0]
        size = os.path.getsize(os.path.join(local, archive))
        rates = []
        proxy = start_proxy(root, server)
        for run in range(args.runs):
            target = "s3://bench/run%d" % run
            # Rate on the wire: the fault proxy (no faults) in front of the server logs each
            # request's start, end and body bytes; the upload is the span of the PUTs.
            subprocess.run([args.binary, "copy", archive, "--from", local, "--to", target, "--s3-endpoint", proxy["url"],
                            "--limit-upload", args.rate], check=True, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            with open(proxy["log"]) as log:
                puts = [e for e in map(json.loads, log) if e["request"].startswith("PUT /bench/run%d/" % run)]
            sent = sum(e["up_bytes"] for e in puts)
            seconds = max(e["time"] for e in puts) - min(e["started"] for e in puts)
            rates.append(sent / seconds)
            print("run %d: %.1f MB in %.2f s = %.2f MB/s on the wire" % (run + 1, sent / 1e6, seconds, sent / seconds / 1e6))
        median = statistics.median(rates)
        deviation = (median - rate) / rate
        verdict = "PASS" if abs(deviation) <= 0.10 else "FAIL"
        print("median %.2f MB/s against a cap of %.2f MB/s: %+.1f %% (%s, target within 10 %%)"
              % (median / 1e6, rate / 1e6, deviation * 100, verdict))
    finally:
        stop_servers(root)
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
