"""Checks the test servers and the fault proxy with curl, sftp and nothing of ours.

    python3 Tests/Servers/testservers.py install
    python3 -m pytest -q Tests/Servers/test_servers.py

Every test gets its own state folder and stops its servers at the end.
Secrets reach curl through a 0600 config file (-K), not its command line.
"""

import hashlib
import json
import os
import random
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
TOOL = os.path.join(HERE, "testservers.py")
SIGV4 = "aws:amz:us-east-1:s3"


# ---------------------------------------------------------------- helpers


@pytest.fixture(scope="session", autouse=True)
def installed():
    if os.geteuid() != 0:
        pytest.skip("the test servers need root")
    r = subprocess.run([sys.executable, TOOL, "install"], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr


class Servers:
    """Starts servers under one root; stops them all at the end."""

    def __init__(self, root):
        self.root = root
        self.started = []
        self.n = 0

    def start(self, kind, *extra):
        r = subprocess.run([sys.executable, TOOL, "start", kind, "--root", self.root] + list(extra),
                           capture_output=True, text=True, timeout=60)
        assert r.returncode == 0, r.stderr
        lines = r.stdout.strip().splitlines()
        assert len(lines) == 1, r.stdout
        info = json.loads(lines[0])
        assert info["kind"] == kind
        assert pid_alive(info["pid"])
        self.started.append(info)
        return info

    def stop(self):
        r = subprocess.run([sys.executable, TOOL, "stop", "--root", self.root],
                           capture_output=True, text=True, timeout=60)
        assert r.returncode == 0, r.stderr

    def secret_file(self, text):
        self.n += 1
        path = os.path.join(self.root, "curl-%d.cfg" % self.n)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(text)
        return path


@pytest.fixture
def servers():
    root = tempfile.mkdtemp(prefix="storebackup-servers-")
    s = Servers(root)
    yield s
    s.stop()
    for info in s.started:
        assert wait_for(lambda: not pid_alive(info["pid"]), 10), info
        assert not port_open(info["port"]), info
    shutil.rmtree(root, ignore_errors=True)


def pid_alive(pid):
    try:
        with open("/proc/%d/stat" % pid) as f:
            stat = f.read()
    except OSError:
        return False
    return stat[stat.rfind(")") + 2] not in "ZX"


def port_open(port):
    try:
        socket.create_connection(("127.0.0.1", port), timeout=1).close()
        return True
    except OSError:
        return False


def wait_for(pred, timeout):
    deadline = time.monotonic() + timeout
    while not pred():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


def cmdline(pid):
    with open("/proc/%d/cmdline" % pid, "rb") as f:
        return f.read().replace(b"\0", b" ").decode()


class Result:
    def __init__(self, rc, code, body, headers, stderr):
        self.rc, self.code, self.body, self.headers, self.stderr = rc, code, body, headers, stderr

    def header(self, name):
        for line in self.headers.splitlines():
            k, _, v = line.partition(":")
            if k.strip().lower() == name.lower():
                return v.strip()
        return None

    def __repr__(self):
        return "curl rc=%d http=%s stderr=%r body=%r" % (
            self.rc, self.code, self.stderr[-300:], self.body[:300])


def curl(*args, config=None, stdin=None, env=None, out=None, timeout=120):
    """Run curl; return its exit code, HTTP status, body (unless OUT), headers, stderr."""
    tmp = tempfile.mkdtemp(prefix="curl-")
    try:
        hdr = os.path.join(tmp, "headers")
        cmd = ["curl", "-sS", "-D", hdr, "-w", "%{http_code}", "-o", out or os.path.join(tmp, "body")]
        if config:
            cmd += ["-K", config]
        cmd += list(args)
        r = subprocess.run(cmd, input=stdin, capture_output=True, env=env, timeout=timeout)
        body = b""
        if not out and os.path.exists(os.path.join(tmp, "body")):
            with open(os.path.join(tmp, "body"), "rb") as f:
                body = f.read()
        headers = open(hdr, encoding="latin-1").read() if os.path.exists(hdr) else ""
        code = int(r.stdout[-3:]) if r.stdout[-3:].isdigit() else 0
        return Result(r.returncode, code, body, headers, r.stderr.decode(errors="replace"))
    finally:
        shutil.rmtree(tmp)


def random_file(path, size, seed=0):
    rng = random.Random(seed)
    h = hashlib.sha256()
    with open(path, "wb") as f:
        left = size
        while left:
            n = min(left, 1 << 20)
            block = rng.randbytes(n)
            h.update(block)
            f.write(block)
            left -= n
    return h.hexdigest()


def sha256_file(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def s3_config(servers, s3, secret=None):
    return servers.secret_file('user = "%s:%s"\naws-sigv4 = "%s"\n' % (
        s3["access_key"], secret or s3["secret_key"], SIGV4))


def dav_config(servers, dav, password=None):
    return servers.secret_file('user = "%s:%s"\n' % (dav["user"], password or dav["password"]))


def proxied(url, proxy):
    return re.sub(r"^http://127\.0\.0\.1:\d+", "http://127.0.0.1:%d" % proxy["port"], url)


def read_log(proxy):
    with open(proxy["log"]) as f:
        return [json.loads(line) for line in f if line.strip()]


# ---------------------------------------------------------------- S3


def test_s3(servers):
    s3 = servers.start("s3")
    assert s3["endpoint"] == "http://127.0.0.1:%d" % s3["port"]
    assert os.path.isdir(os.path.join(s3["data_dir"], s3["bucket"]))
    # The keys are not on rclone's command line (they travel in its environment).
    assert s3["secret_key"] not in cmdline(s3["pid"])
    assert os.stat(os.path.join(s3["state_dir"], "server.json")).st_mode & 0o077 == 0
    src = os.path.join(servers.root, "up.bin")
    digest = random_file(src, 3_000_000)
    cfg = s3_config(servers, s3)
    base = "%s/%s" % (s3["endpoint"], s3["bucket"])

    r = curl("-T", src, base + "/sub/one.bin", config=cfg)
    assert (r.rc, r.code) == (0, 200), r
    # With the payload's real hash declared (what real S3 wants).
    r = curl("-T", src, "-H", "x-amz-content-sha256: " + digest, base + "/sub/two.bin", config=cfg)
    assert (r.rc, r.code) == (0, 200), r
    assert sha256_file(os.path.join(s3["data_dir"], s3["bucket"], "sub", "one.bin")) == digest

    r = curl(base + "/sub/one.bin", config=cfg)
    assert (r.rc, r.code) == (0, 200), r
    assert hashlib.sha256(r.body).hexdigest() == digest

    # ListObjectsV2. curl 7.88 signs the query as written: it must already be
    # in canonical form (parameters sorted, '/' as %2F), else 403.
    r = curl(base + "?list-type=2&prefix=sub%2F", config=cfg)
    assert (r.rc, r.code) == (0, 200), r
    keys = re.findall(rb"<Key>([^<]*)</Key>", r.body)
    assert keys == [b"sub/one.bin", b"sub/two.bin"], r.body

    bad = s3_config(servers, s3, secret="wrong" + s3["secret_key"])
    for args in (["-T", src, base + "/sub/bad.bin"], [base + "/sub/one.bin"], [base + "?list-type=2"]):
        r = curl(*args, config=bad)
        assert r.code == 403, r
        assert b"SignatureDoesNotMatch" in r.body, r
    assert not os.path.exists(os.path.join(s3["data_dir"], s3["bucket"], "sub", "bad.bin"))

    r = curl("-X", "DELETE", base + "/sub/one.bin", config=cfg)
    assert r.code == 204, r
    r = curl(base + "/sub/one.bin", config=cfg)
    assert r.code == 404 and b"NoSuchKey" in r.body, r


# ---------------------------------------------------------------- WebDAV


def test_webdav(servers):
    dav = servers.start("webdav")
    assert dav["url"] == "http://127.0.0.1:%d/dav/" % dav["port"]
    assert dav["password"] not in cmdline(dav["pid"])
    assert os.stat(os.path.join(dav["state_dir"], "htpasswd")).st_mode & 0o077 == 0
    src = os.path.join(servers.root, "up.bin")
    digest = random_file(src, 3_000_000)
    cfg = dav_config(servers, dav)
    url = dav["url"]

    r = curl("-T", src, url + "one.bin", config=cfg)
    assert (r.rc, r.code) == (0, 201), r
    r = curl("-X", "MKCOL", url + "sub/", config=cfg)
    assert r.code == 201, r
    r = curl("-X", "MOVE", "-H", "Destination: %ssub/moved.bin" % url, url + "one.bin", config=cfg)
    assert r.code == 201, r
    r = curl("-X", "PROPFIND", "-H", "Depth: 1", url + "sub/", config=cfg)
    assert r.code == 207, r
    assert b"<D:href>/dav/sub/moved.bin</D:href>" in r.body, r.body
    r = curl(url + "sub/moved.bin", config=cfg)
    assert r.code == 200 and hashlib.sha256(r.body).hexdigest() == digest, r
    assert sha256_file(os.path.join(dav["data_dir"], "sub", "moved.bin")) == digest

    bad = dav_config(servers, dav, password="wrong")
    r = curl("-T", src, url + "bad.bin", config=bad)
    assert r.code == 401, r
    r = curl(url + "sub/moved.bin")
    assert r.code == 401, r
    assert not os.path.exists(os.path.join(dav["data_dir"], "bad.bin"))


# ---------------------------------------------------------------- Dropbox emulator


def test_dropbox(servers):
    box = servers.start("dropbox", "--page-size", "2")
    assert box["state_dir"].startswith(servers.root)
    assert box["access_token"] not in cmdline(box["pid"])
    assert os.stat(os.path.join(box["state_dir"], "server.json")).st_mode & 0o077 == 0
    assert box["page_size"] == 2
    cfg = servers.secret_file('header = "Authorization: Bearer %s"\n' % box["access_token"])
    r = curl("--cacert", box["ca_file"], "-X", "POST", "-H", "Content-Type: application/json",
             "--data", "null", box["api_url"] + "/2/users/get_current_account", config=cfg)
    assert (r.rc, r.code) == (0, 200), r
    r = curl("--cacert", box["ca_file"], "-X", "POST", "-H", "Content-Type: application/json",
             "--data", "null", box["api_url"] + "/2/users/get_current_account")
    assert r.code == 400, r
    servers.stop()
    assert wait_for(lambda: not pid_alive(box["pid"]), 10)


# ---------------------------------------------------------------- SFTP


def test_sftp(servers):
    sftp = servers.start("sftp")
    assert os.stat(sftp["key"]).st_mode & 0o077 == 0
    src = os.path.join(servers.root, "up.bin")
    digest = random_file(src, 3_000_000)
    url = sftp["url"]
    assert url == "sftp://%s@127.0.0.1:%d%s/" % (sftp["user"], sftp["port"], sftp["path"])
    key = ["--key", sftp["key"], "--pubkey", sftp["public_key"]]

    r = curl(*key, "--hostpubsha256", sftp["host_key_sha256"], "-T", src, url + "one.bin")
    assert r.rc == 0, r
    assert sha256_file(os.path.join(sftp["path"], "one.bin")) == digest
    r = curl(*key, "--hostpubsha256", sftp["host_key_sha256"], url)
    assert r.rc == 0 and re.search(rb" one\.bin$", r.body, re.M), r

    # The known_hosts file, as libcurl + libssh2 read it (the curl tool reads
    # $HOME/.ssh/known_hosts).
    home = os.path.join(servers.root, "home")
    os.makedirs(os.path.join(home, ".ssh"))
    shutil.copy(sftp["known_hosts"], os.path.join(home, ".ssh", "known_hosts"))
    env = dict(os.environ, HOME=home)
    r = curl(*key, url + "one.bin", env=env)
    assert r.rc == 0 and hashlib.sha256(r.body).hexdigest() == digest, r

    # A different host key in known_hosts is refused.
    other = os.path.join(servers.root, "other")
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", other], check=True)
    wrong_host = open(other + ".pub").read().split()[:2]
    with open(os.path.join(home, ".ssh", "known_hosts"), "w") as f:
        f.write("[127.0.0.1]:%d %s %s\n" % (sftp["port"], *wrong_host))
    r = curl(*key, url, env=env)
    assert r.rc == 60, r  # CURLE_PEER_FAILED_VERIFICATION
    r = curl(*key, "--hostpubsha256", "A" * 43 + "=", url)
    assert r.rc == 60, r

    # A key the server does not know is refused.
    r = curl("--key", other, "--pubkey", other + ".pub", "--hostpubsha256",
             sftp["host_key_sha256"], url)
    assert r.rc == 67, r  # CURLE_LOGIN_DENIED

    # OpenSSH's sftp in batch mode, strict about the host key.
    batch = os.path.join(servers.root, "batch")
    with open(batch, "w") as f:
        f.write("put %s two.bin\nls -1\n" % src)
    ssh_opts = ["-o", "UserKnownHostsFile=" + sftp["known_hosts"], "-o", "StrictHostKeyChecking=yes",
                "-o", "IdentitiesOnly=yes", "-o", "BatchMode=yes", "-P", str(sftp["port"])]
    target = "%s@127.0.0.1" % sftp["user"]
    r = subprocess.run(["sftp", "-b", batch, "-i", sftp["key"]] + ssh_opts + [target],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert "two.bin" in r.stdout and "one.bin" in r.stdout
    assert sha256_file(os.path.join(sftp["path"], "two.bin")) == digest
    r = subprocess.run(["sftp", "-b", batch, "-i", other] + ssh_opts + [target],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode != 0 and "Permission denied" in r.stderr, r.stderr


# ---------------------------------------------------------------- start/stop


def test_stop_is_thorough_and_idempotent(servers):
    infos = [servers.start(k) for k in ("s3", "webdav", "sftp", "s3")]
    assert len({i["port"] for i in infos}) == 4
    assert infos[3]["state_dir"].endswith("/s3-2")
    proxy = servers.start("proxy", "--upstream", "127.0.0.1:%d" % infos[0]["port"])
    infos.append(proxy)
    for i in infos:
        assert port_open(i["port"])
    servers.stop()
    for i in infos:
        assert not pid_alive(i["pid"]), i
        assert not port_open(i["port"]), i
    servers.stop()  # again: nothing to do, no error


# ---------------------------------------------------------------- fault proxy


def start_proxy(servers, upstream_port, plan=None, tcp=False, send_buffer=None):
    extra = ["--upstream", "127.0.0.1:%d" % upstream_port] + (["--tcp"] if tcp else [])
    if send_buffer:
        extra += ["--send-buffer", str(send_buffer)]
    if plan is not None:
        path = os.path.join(servers.root, "plan-%d.json" % len(servers.started))
        with open(path, "w") as f:
            json.dump(plan, f)
        extra += ["--plan", path]
    return servers.start("proxy", *extra)


def test_proxy_status_faults_in_sequence(servers):
    dav = servers.start("webdav")
    proxy = start_proxy(servers, dav["port"], {"rules": [
        {"requests": [2, 5], "fault": "500"},
        {"requests": [3], "fault": "429"},
        {"requests": [4], "fault": "503", "retry_after": 7},
    ]})
    cfg = dav_config(servers, dav)
    url = proxied(dav["url"], proxy)
    src = os.path.join(servers.root, "up.bin")
    random_file(src, 200_000)
    got = []
    for i in range(1, 7):
        r = curl("-T", src, url + "f%d" % i, config=cfg)
        assert r.rc == 0, r
        got.append((r.code, r.header("Retry-After")))
    assert got == [(201, None), (500, None), (429, "1"), (503, "7"), (500, None), (201, None)]
    # Faulted requests never reached the server.
    assert sorted(os.listdir(dav["data_dir"])) == ["f1", "f6"]
    # A chunked answer (Apache streams a long PROPFIND) comes through whole.
    os.mkdir(os.path.join(dav["data_dir"], "many"))
    for i in range(300):
        open(os.path.join(dav["data_dir"], "many", "file-%03d" % i), "w").close()
    r = curl("-X", "PROPFIND", "-H", "Depth: 1", url + "many/", config=cfg)
    assert r.code == 207 and r.header("Transfer-Encoding") == "chunked", r
    assert r.body.count(b"<D:response") == 301 and r.body.rstrip().endswith(b"</D:multistatus>")
    log = read_log(proxy)[:6]
    assert [e["n"] for e in log] == [1, 2, 3, 4, 5, 6]
    assert [e["request"] for e in log] == ["PUT /dav/f%d HTTP/1.1" % i for i in range(1, 7)]
    assert [e["fault"] for e in log] == [None, "status 500", "status 429 retry-after 1",
                                          "status 503 retry-after 7", "status 500", None]


def test_proxy_resets(servers):
    dav = servers.start("webdav")
    cfg = dav_config(servers, dav)
    src = os.path.join(servers.root, "up.bin")
    digest = random_file(src, 3_000_000)
    r = curl("-T", src, dav["url"] + "seed.bin", config=cfg)
    assert r.code == 201, r
    proxy = start_proxy(servers, dav["port"], {"rules": [
        {"method": "PUT", "requests": [1], "fault": "reset", "phase": "request"},
        {"method": "PUT", "requests": [2], "fault": "reset", "phase": "before_response"},
        {"method": "GET", "requests": [1], "fault": "reset", "phase": "response",
         "after_bytes": 100_000},
    ]})
    url = proxied(dav["url"], proxy)

    # Mid-upload: curl sees a connection error; nothing lands.
    r = curl("-T", src, url + "a.bin", config=cfg)
    assert r.rc in (52, 55, 56) and r.code in (0, 100), r  # empty reply / send / recv failure
    assert not os.path.exists(os.path.join(dav["data_dir"], "a.bin"))
    # The upload lands but the answer is lost.
    r = curl("-T", src, url + "b.bin", config=cfg)
    assert r.rc in (52, 56), r
    assert sha256_file(os.path.join(dav["data_dir"], "b.bin")) == digest
    # Mid-download: the head and 100 kB arrive, then the reset.
    r = curl(url + "seed.bin", config=cfg)
    assert r.rc in (18, 56) and r.code == 200, r
    assert len(r.body) == 100_000 and r.body == open(src, "rb").read(100_000)
    # Then all is well again.
    r = curl(url + "seed.bin", config=cfg)
    assert r.rc == 0 and hashlib.sha256(r.body).hexdigest() == digest, r
    log = read_log(proxy)
    assert [e["fault"] for e in log] == [
        "reset request after 1500000 body bytes",
        "reset before response (upstream answered 201)",
        "reset response after 100000 body bytes",
        None]
    assert log[2]["down_bytes"] == 100_000


def test_proxy_streams_50mb_intact(servers):
    dav = servers.start("webdav")
    s3 = servers.start("s3")
    dproxy = start_proxy(servers, dav["port"])
    sproxy = start_proxy(servers, s3["port"])
    src = os.path.join(servers.root, "big.bin")
    size = 50 * 1024 * 1024
    digest = random_file(src, size, seed=50)
    out = os.path.join(servers.root, "back.bin")

    # WebDAV, Content-Length upload, download.
    cfg = dav_config(servers, dav)
    url = proxied(dav["url"], dproxy)
    r = curl("-T", src, url + "big.bin", config=cfg)
    assert (r.rc, r.code) == (0, 201), r
    assert sha256_file(os.path.join(dav["data_dir"], "big.bin")) == digest
    r = curl(url + "big.bin", config=cfg, out=out)
    assert (r.rc, r.code) == (0, 200), r
    assert sha256_file(out) == digest
    # WebDAV, chunked upload (body from stdin, length unknown).
    with open(src, "rb") as f:
        r = curl("-T", "-", url + "chunked.bin", config=cfg, stdin=f.read())
    assert (r.rc, r.code) == (0, 201), r
    assert sha256_file(os.path.join(dav["data_dir"], "chunked.bin")) == digest

    # S3 through the proxy: the Host header is passed as is, so SigV4 holds.
    cfg = s3_config(servers, s3)
    base = "%s/%s" % (proxied(s3["endpoint"], sproxy), s3["bucket"])
    r = curl("-T", src, "-H", "x-amz-content-sha256: UNSIGNED-PAYLOAD", base + "/big.bin", config=cfg)
    assert (r.rc, r.code) == (0, 200), r
    os.unlink(out)
    r = curl(base + "/big.bin", config=cfg, out=out)
    assert (r.rc, r.code) == (0, 200), r
    assert sha256_file(out) == digest

    # The proxy streamed: its peak memory stayed far below the body size.
    for p in (dproxy, sproxy):
        with open("/proc/%d/status" % p["pid"]) as f:
            hwm_kb = int(re.search(r"VmHWM:\s+(\d+)", f.read()).group(1))
        assert hwm_kb < 40 * 1024, hwm_kb
    log = read_log(dproxy)
    assert [(e["status"], e["up_bytes"], e["down_bytes"]) for e in log] == [
        (201, size, log[0]["down_bytes"]), (200, 0, size), (201, size, log[2]["down_bytes"])]


def test_proxy_stamps_when_body_bytes_pass(servers):
    # curl paces the bodies (--limit-rate, 1024-based): the first and last stamps of each
    # direction must be as far apart as the pace makes them, in HTTP and in TCP mode. A
    # download is stamped as it goes into the socket: --send-buffer keeps that close to
    # curl's reading.
    dav = servers.start("webdav")
    proxy = start_proxy(servers, dav["port"], send_buffer=32768)
    relay = start_proxy(servers, dav["port"], tcp=True, send_buffer=32768)
    cfg = dav_config(servers, dav)
    src = os.path.join(servers.root, "paced.bin")
    size = 1_500_000
    random_file(src, size, seed=3)
    pace = 3_000 * 1024
    for p in (proxy, relay):
        url = proxied(dav["url"], p)
        r = curl("--limit-rate", "3000k", "-T", src, url + "paced.bin", config=cfg)
        assert r.code in (201, 204), r
        r = curl("--limit-rate", "3000k", url + "paced.bin", config=cfg)
        assert r.code == 200 and len(r.body) == size, r
        r = curl("-T", src, url + "fast.bin", config=cfg)
        assert r.code in (201, 204), r
    # An entry is written when its request (TCP: its connection) ends.
    assert wait_for(lambda: len(read_log(relay)) >= 3, 10), read_log(relay)
    for p in (proxy, relay):
        paced_up, paced_down, fast = sorted(read_log(p), key=lambda e: e["n"])[:3]
        for e, way in ((paced_up, "up"), (paced_down, "down"), (fast, "up")):
            assert e[way + "_bytes"] >= size, e
            assert e.get("started", e[way + "_first"]) <= e[way + "_first"] <= e[way + "_last"] <= e["time"], e
        # curl's --limit-rate keeps an average since the transfer began: a start delayed on a
        # busy machine is caught up at full speed, so a paced body can pass in well under
        # size/pace (seen: 46 % of it). A quarter still tells paced stamps from end-of-request
        # ones, and the fast upload, unpaced, stays far below it.
        for e, way in ((paced_up, "up"), (paced_down, "down")):
            assert e[way + "_last"] - e[way + "_first"] >= 0.25 * size / pace, e
        assert fast["up_last"] - fast["up_first"] < 0.25 * size / pace, fast


def test_proxy_keepalive_probability_and_control(servers):
    dav = servers.start("webdav")
    cfg = dav_config(servers, dav)
    src = os.path.join(servers.root, "small.bin")
    random_file(src, 1000)
    assert curl("-T", src, dav["url"] + "s.bin", config=cfg).code == 201
    proxy = start_proxy(servers, dav["port"])
    url = proxied(dav["url"], proxy) + "s.bin"

    # Keep-alive: five requests on one connection, both ways.
    r = subprocess.run(["curl", "-sS", "-K", cfg, "-w", "%{http_code} %{num_connects}\\n"]
                       + sum([["-o", "/dev/null", url] for _ in range(5)], []),
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert r.stdout.split("\n")[:5] == ["200 1", "200 0", "200 0", "200 0", "200 0"]
    log = read_log(proxy)
    assert len({e["conn"] for e in log}) == 1 and len(log) == 5

    # A plan set through the control endpoint; probability with a seed is the
    # same every time, and matches random.Random(seed).
    plan = {"seed": 42, "rules": [{"probability": 0.5, "fault": "503", "method": "GET"}]}
    patterns = []
    for _ in range(2):
        r = curl("-X", "PUT", "--data-binary", json.dumps(plan), proxy["control"] + "plan")
        assert r.code == 200, r
        patterns.append([curl(url, config=cfg).code for _ in range(12)])
    rng = random.Random(42)
    expected = [503 if rng.random() < 0.5 else 200 for _ in range(12)]
    assert patterns[0] == patterns[1] == expected
    assert 200 in expected and 503 in expected
    r = curl(proxy["control"] + "plan")
    state = json.loads(r.body)
    assert state["requests"] == 12 and state["rules"][0]["fired"] == expected.count(503)
    entries = json.loads(curl(proxy["control"] + "log").body)
    assert len(entries) == 5 + 24
    # A bad plan is refused and the old one stays.
    r = curl("-X", "PUT", "--data-binary", '{"rules": [{"fault": "explode"}]}',
             proxy["control"] + "plan")
    assert r.code == 400, r
    assert json.loads(curl(proxy["control"] + "plan").body)["plan"] == plan


def test_proxy_flip_and_range200(servers):
    dav = servers.start("webdav")
    cfg = dav_config(servers, dav)
    src = os.path.join(servers.root, "up.bin")
    digest = random_file(src, 200_000)
    proxy = start_proxy(servers, dav["port"], {"rules": [
        {"method": "PUT", "requests": [1], "fault": "flip", "after_bytes": 1234},
        {"method": "GET", "fault": "range200"},
    ]})
    url = proxied(dav["url"], proxy)
    # The upload lands with exactly one byte inverted.
    r = curl("-T", src, url + "f.bin", config=cfg)
    assert r.rc == 0 and r.code == 201, r
    stored = open(os.path.join(dav["data_dir"], "f.bin"), "rb").read()
    original = open(src, "rb").read()
    assert len(stored) == len(original) and sha256_file(src) == digest
    assert [i for i in range(len(stored)) if stored[i] != original[i]] == [1234]
    assert stored[1234] == original[1234] ^ 0xFF
    # A range answer comes as 200 with its Content-Range and only the tail.
    r = curl("-r", "150000-", url + "f.bin", config=cfg)
    assert r.code == 200 and r.header("content-range") == "bytes 150000-199999/200000", r
    assert r.body == stored[150000:]
    assert [e["fault"] for e in read_log(proxy)] == ["flip request body byte 1234", "range200 (206 sent as 200)"]


def test_proxy_norange(servers):
    dav = servers.start("webdav")
    cfg = dav_config(servers, dav)
    src = os.path.join(servers.root, "whole.bin")
    random_file(src, 100_000)
    r = curl("-T", src, dav["url"] + "w.bin", config=cfg)
    assert r.rc == 0 and r.code == 201, r
    proxy = start_proxy(servers, dav["port"], {"rules": [{"method": "GET", "fault": "norange"}]})
    # The Range header never reaches the server: the whole file comes back with 200.
    r = curl("-r", "1000-1999", proxied(dav["url"], proxy) + "w.bin", config=cfg)
    assert r.code == 200 and r.header("content-range") is None, r
    assert r.body == open(src, "rb").read()
    assert [e["fault"] for e in read_log(proxy)] == ["norange (Range removed)"]


def test_proxy_response_faults(servers):
    # Answers that lie: a flipped body byte, a 206 for another range than the one asked
    # for, a 206 shorter than asked; each body consistent with its headers.
    dav = servers.start("webdav")
    cfg = dav_config(servers, dav)
    src = os.path.join(servers.root, "answers.bin")
    random_file(src, 200_000)
    original = open(src, "rb").read()
    r = curl("-T", src, dav["url"] + "a.bin", config=cfg)
    assert r.rc == 0 and r.code == 201, r
    proxy = start_proxy(servers, dav["port"], {"rules": [
        {"method": "GET", "requests": [1], "fault": "flip", "phase": "response", "after_bytes": 777},
        {"method": "GET", "requests": [2], "fault": "shift206", "shift": 1000},
        {"method": "GET", "requests": [3], "fault": "short206", "short_by": 300},
        {"method": "GET", "requests": [4], "fault": "shift206"},
    ]})
    url = proxied(dav["url"], proxy) + "a.bin"
    r = curl(url, config=cfg)
    assert r.code == 200 and len(r.body) == len(original), r
    assert [i for i in range(len(r.body)) if r.body[i] != original[i]] == [777]
    r = curl("-r", "5000-5999", url, config=cfg)
    assert r.code == 206 and r.header("content-range") == "bytes 4000-4999/200000", r
    assert r.body == original[4000:5000]
    r = curl("-r", "5000-5999", url, config=cfg)
    assert r.code == 206 and r.header("content-range") == "bytes 5000-5699/200000", r
    assert r.body == original[5000:5700]
    # A range that starts before the shift is moved later instead.
    r = curl("-r", "0-99", url, config=cfg)
    assert r.code == 206 and r.header("content-range") == "bytes 4096-4195/200000", r
    assert r.body == original[4096:4196]
    assert [e["fault"] for e in read_log(proxy)] == [
        "flip response body byte 777",
        "shift206 (bytes=5000-5999 asked, bytes=4000-4999 sent)",
        "short206 (bytes=5000-5999 asked, bytes=5000-5699 sent)",
        "shift206 (bytes=0-99 asked, bytes=4096-4195 sent)"]


def test_proxy_shift206_answers_206_for_rclone(servers):
    # rclone's S3 server answers a range with 200 and a Content-Range: the shifted answer
    # still reaches the client as a 206.
    s3 = servers.start("s3")
    cfg = s3_config(servers, s3)
    src = os.path.join(servers.root, "s3.bin")
    random_file(src, 100_000)
    key = "%s/%s/s.bin" % (s3["endpoint"], s3["bucket"])
    r = curl("-T", src, key, config=cfg)
    assert (r.rc, r.code) == (0, 200), r
    proxy = start_proxy(servers, s3["port"], {"rules": [{"method": "GET", "fault": "shift206", "shift": 10}]})
    r = curl("-r", "50-59", proxied(key, proxy), config=cfg)
    assert r.code == 206 and r.header("content-range") == "bytes 40-49/100000", r
    assert r.body == open(src, "rb").read()[40:50]


def test_proxy_strip_headers(servers):
    # An answer without some of its headers (a gateway that hides S3's Object Lock ones).
    dav = servers.start("webdav")
    cfg = dav_config(servers, dav)
    src = os.path.join(servers.root, "head.bin")
    random_file(src, 1000)
    r = curl("-T", src, dav["url"] + "h.bin", config=cfg)
    assert r.rc == 0 and r.code == 201, r
    proxy = start_proxy(servers, dav["port"], {"rules": [
        {"method": "HEAD", "fault": "strip_headers", "headers": ["ETag", "last-"]}]})
    r = curl("-I", proxied(dav["url"], proxy) + "h.bin", config=cfg)
    assert r.code == 200 and r.header("etag") is None and r.header("last-modified") is None, r
    assert r.header("content-length") == "1000", r
    assert [e["fault"] for e in read_log(proxy)] == ["strip_headers (etag, last-modified)"]


def test_proxy_tcp_mode(servers):
    sftp = servers.start("sftp")
    proxy = start_proxy(servers, sftp["port"], {"rules": [
        {"requests": [1], "fault": "reset", "after_bytes": 0},
        {"requests": [2], "fault": "reset", "after_bytes": 5},
        {"fault": "reset", "until_exists": os.path.join(sftp["data_dir"], "marker*"), "times": 1},
    ]}, tcp=True)

    def banner():
        data = b""
        try:
            s = socket.create_connection(("127.0.0.1", proxy["port"]), timeout=10)
        except ConnectionResetError:
            return b"<reset>"
        try:
            while True:
                chunk = s.recv(4096)
                if not chunk:
                    break
                data += chunk
                if data.endswith(b"\n"):
                    break
        except ConnectionResetError:
            data += b"<reset>"
        s.close()
        return data

    assert banner() == b"<reset>"                      # reset right after accepting
    assert banner() == b"SSH-2<reset>"                 # reset inside the banner
    assert banner().startswith(b"SSH-2.0-")            # untouched
    open(os.path.join(sftp["data_dir"], "marker1"), "w").close()
    assert banner() == b"<reset>"                      # the path exists: the server's bytes are cut
    assert banner().startswith(b"SSH-2.0-")            # once only
    # An entry is written when its connection ends, which the proxy sees a moment later.
    assert wait_for(lambda: len(read_log(proxy)) >= 5, 10), read_log(proxy)
    faults = [e["fault"] for e in sorted(read_log(proxy), key=lambda e: e["n"])]
    assert faults[:2] == ["reset after 0 server bytes", "reset after 5 server bytes"]
    assert faults[2] is None and faults[3].startswith("reset: ") and faults[4] is None
