#!/usr/bin/env python3
"""The benchmarks' S3 server (rclone serve s3, started by Tests/Servers/testservers.py) and
the fault proxy in front of it (Tests/Servers/faultproxy.py, which logs every request with
its method, bytes each way and times), in one place for every bench module.

    server = start_s3(root)                  # {"endpoint", "port", "bucket", "access_key", ...}
    env = s3_env(server, base_env)           # AWS_* for the client commands
    proxy = start_proxy(root, server)        # {"url", "port", "log", ...}
    stop_servers(root)                       # every server started under root, by its pid
    log = Proxy(proxy).entries()             # the proxy's log: one dict per request
    method(entry), object_key(entry, bucket, prefix), by_method(entries)

Standard library only.
"""
import json
import os
import subprocess
import sys
import urllib.parse

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SERVERS = os.path.join(REPO, "Tests", "Servers", "testservers.py")


def start_s3(root, bucket="bench"):
    """Starts rclone serve s3 with its state under root; returns testservers.py's description.
    Raises subprocess.CalledProcessError when it does not start."""
    os.makedirs(root, exist_ok=True)
    started = subprocess.run([sys.executable, SERVERS, "start", "s3", "--root", root, "--bucket", bucket],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    if started.returncode != 0:
        sys.stderr.write(started.stderr.decode(errors="replace"))
        raise subprocess.CalledProcessError(started.returncode, started.args, started.stdout, started.stderr)
    return json.loads(started.stdout)


def start_proxy(root, server, send_buffer=None):
    """Starts the fault proxy (no faults) in front of server; its log is one JSON line per request."""
    argv = [sys.executable, SERVERS, "start", "proxy", "--root", root, "--upstream", f"127.0.0.1:{server['port']}"]
    if send_buffer:
        argv += ["--send-buffer", str(send_buffer)]
    return json.loads(subprocess.run(argv, check=True, stdout=subprocess.PIPE).stdout)


def stop_servers(root):
    """Stops every server and proxy started under root (by the pids testservers.py recorded)."""
    subprocess.run([sys.executable, SERVERS, "stop", "--root", root], stdout=subprocess.DEVNULL,
                   stderr=subprocess.DEVNULL)


def s3_env(server, base=None, **extra):
    """base (default os.environ) with the server's credentials in AWS_*, and extra."""
    return dict(os.environ if base is None else base, AWS_ACCESS_KEY_ID=server["access_key"],
                AWS_SECRET_ACCESS_KEY=server["secret_key"], AWS_REGION=server.get("region", "us-east-1"), **extra)


def write_credentials(server, path):
    """A credentials file (NAME=value lines, mode 0600) for --credentials or `credentials:`."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(f"AWS_ACCESS_KEY_ID={server['access_key']}\nAWS_SECRET_ACCESS_KEY={server['secret_key']}\n"
                f"AWS_REGION={server.get('region', 'us-east-1')}\n")
    os.chmod(path, 0o600)
    return path


class Proxy:
    """The fault proxy's request log (one JSON object per line)."""

    def __init__(self, info):
        self.url, self.path = info["url"], info["log"]

    def entries(self):
        try:
            with open(self.path) as f:
                return [json.loads(line) for line in f if line.strip()]
        except OSError:
            return []


def method(entry):
    return entry["request"].split(" ", 1)[0]


def object_key(entry, bucket, prefix):
    """The backup's name an S3 request is about ('' for a listing or the bucket)."""
    target = entry["request"].split(" ")[1].split("?", 1)[0]
    path = urllib.parse.unquote(target)
    start = f"/{bucket}/{prefix}/"
    return path[len(start):] if path.startswith(start) else ""


def by_method(entries):
    """{method: requests}, by method name."""
    counts = {}
    for entry in entries:
        counts[method(entry)] = counts.get(method(entry), 0) + 1
    return dict(sorted(counts.items()))
