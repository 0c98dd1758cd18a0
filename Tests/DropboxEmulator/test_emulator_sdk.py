"""Checks the Dropbox emulator with the official Dropbox Python SDK and curl.

    python3 -m pip install dropbox pytest
    python3 -m pytest -q Tests/DropboxEmulator

The emulator runs as a daemon on a free loopback port for this module and is
stopped by its pid at the end; every test starts from an empty Dropbox
(POST /_emulator/reset) with a fresh access token.

How the SDK is pointed at it (dropbox/session.py of the installed SDK): the
SDK builds every URL as https://{host}/..., taking the hosts from the
environment variables DROPBOX_API_HOST, DROPBOX_API_CONTENT_HOST and
DROPBOX_WEB_HOST *when dropbox.session is first imported* (module constants,
copied into dropbox.dropbox_client and dropbox.oauth at their import). So the
fixture sets them to 127.0.0.1:PORT before importing dropbox (and reloads the
modules if something imported them earlier). TLS: its requests session is made
with verify=True when no ca_certs is given, so requests takes the CA bundle from
REQUESTS_CA_BUNDLE, which the fixture sets to the emulator's CA file.
"""

import hashlib
import importlib
import json
import os
import ssl
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
EMULATOR = os.path.join(HERE, "dropbox_emulator.py")
MiB = 1024 * 1024


# ---------------------------------------------------------------- helpers


def dropbox_content_hash(data):
    """Independent of the emulator: SHA-256 per 4 MiB block, SHA-256 of the digests."""
    digests = b"".join(hashlib.sha256(data[i:i + 4 * MiB]).digest()
                       for i in range(0, len(data), 4 * MiB))
    return hashlib.sha256(digests).hexdigest()


def pid_alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:
        with open("/proc/%d/stat" % pid) as f:
            return f.read().split(")")[-1].split()[0] != "Z"
    except OSError:
        return False


def stop_pid(pid, timeout=5.0):
    if not pid_alive(pid):
        return
    os.kill(pid, 15)
    deadline = time.time() + timeout
    while time.time() < deadline:
        if not pid_alive(pid):
            return
        time.sleep(0.05)
    os.kill(pid, 9)


def start_emulator(state, *extra):
    pidfile = os.path.join(state, "emulator.pid")
    r = subprocess.run([sys.executable, EMULATOR, "--daemon", "--pidfile", pidfile,
                        "--state", state, "--port", "0", *extra],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    info = json.loads(r.stdout.strip().splitlines()[-1])
    with open(pidfile) as f:
        assert int(f.read()) == info["pid"]
    return info


class Emu:
    def __init__(self, info):
        self.info = info
        self.url = info["api_url"]
        self.ctx = ssl.create_default_context(cafile=info["ca_file"])

    def control(self, name, body=None, method="POST", query=None):
        url = self.url + "/_emulator/" + name
        if query:
            url += "?" + urllib.parse.urlencode(query)
        data = json.dumps(body).encode() if body is not None else b""
        req = urllib.request.Request(url, data=data if method == "POST" else None,
                                     method=method)
        with urllib.request.urlopen(req, context=self.ctx, timeout=30) as r:
            return json.loads(r.read())

    def token(self):
        return self.control("issue_token")

    def log(self, since=0):
        return self.control("log", method="GET", query={"since": since})["requests"]

    def last_seq(self):
        entries = self.log()
        return entries[-1]["seq"] if entries else 0


def curl(emu, *args, token=None):
    """curl against the emulator; returns (status, headers dict (lower-case), body bytes)."""
    cmd = ["curl", "-sS", "--cacert", emu.info["ca_file"], "-D", "-", "-o", "-"]
    if token:
        cmd += ["-H", "Authorization: Bearer " + token]
    r = subprocess.run(cmd + list(args), capture_output=True, timeout=60)
    assert r.returncode == 0, r.stderr
    out = r.stdout
    while True:  # skip 100 Continue
        head, _, out = out.partition(b"\r\n\r\n")
        lines = head.decode("latin-1").split("\r\n")
        status = int(lines[0].split()[1])
        if status != 100:
            break
    headers = {}
    for line in lines[1:]:
        k, _, v = line.partition(":")
        headers[k.strip().lower()] = v.strip()
    return status, headers, out


# ---------------------------------------------------------------- fixtures


@pytest.fixture(scope="module")
def emu(tmp_path_factory):
    info = start_emulator(str(tmp_path_factory.mktemp("dropbox-emulator")))
    try:
        yield Emu(info)
    finally:
        stop_pid(info["pid"])


@pytest.fixture(scope="module")
def sdk(emu):
    host = "127.0.0.1:%d" % emu.info["port"]
    saved = {k: os.environ.get(k) for k in ("DROPBOX_API_HOST", "DROPBOX_API_CONTENT_HOST",
                                            "DROPBOX_WEB_HOST", "DROPBOX_API_NOTIFY_HOST",
                                            "REQUESTS_CA_BUNDLE", "NO_PROXY", "no_proxy")}
    os.environ.update({
        "DROPBOX_API_HOST": host,
        "DROPBOX_API_CONTENT_HOST": host,
        "DROPBOX_WEB_HOST": host,
        "DROPBOX_API_NOTIFY_HOST": host,
        "REQUESTS_CA_BUNDLE": emu.info["ca_file"],
        "NO_PROXY": "127.0.0.1,localhost",
        "no_proxy": "127.0.0.1,localhost",
    })
    try:
        dropbox = pytest.importorskip("dropbox", reason="python3 -m pip install dropbox")
        if dropbox.session.API_HOST != host:  # imported before us: read the variables again
            for name in ("dropbox.session", "dropbox.oauth", "dropbox.dropbox_client", "dropbox"):
                importlib.reload(sys.modules[name])
            dropbox = sys.modules["dropbox"]
        assert dropbox.session.API_HOST == host
        assert dropbox.session.API_CONTENT_HOST == host
        assert dropbox.session.WEB_HOST == host
        yield dropbox
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


@pytest.fixture(autouse=True)
def clean(emu):
    emu.control("reset")
    emu.control("config", {"page_size": 3, "quota": None, "token_lifetime": 14400,
                           "max_request_bytes": 150 * MiB})


@pytest.fixture
def dbx(sdk, emu):
    d = sdk.Dropbox(oauth2_access_token=emu.token()["access_token"], max_retries_on_error=0)
    yield d
    d.close()


# ---------------------------------------------------------------- SDK: basics


def test_sdk_reaches_emulator(sdk, dbx, emu):
    acct = dbx.users_get_current_account()
    assert acct.account_id == emu.info["account_id"]
    assert dbx.check_user("ping").result == "ping"
    usage = dbx.users_get_space_usage()
    assert usage.used == 0 and usage.allocation.is_individual()
    routes = [e["route"] for e in emu.log()]
    assert "/2/users/get_current_account" in routes and "/2/check/user" in routes


def test_upload_download_round_trip(sdk, dbx, emu, tmp_path):
    data = os.urandom(300 * 1024) + b"end"
    md = dbx.files_upload(data, "/Backups/Store One.db",
                          mode=sdk.files.WriteMode.add)  # the SDK adds content_hash itself
    assert md.name == "Store One.db"
    assert md.path_lower == "/backups/store one.db"
    assert md.path_display == "/Backups/Store One.db"
    assert md.size == len(data)
    assert md.content_hash == dropbox_content_hash(data)
    assert md.id.startswith("id:") and len(md.rev) >= 9
    # case-insensitive paths, like Dropbox
    got_md, resp = dbx.files_download("/BACKUPS/store one.DB")
    assert resp.content == data
    assert got_md.rev == md.rev and got_md.content_hash == md.content_hash
    out = tmp_path / "copy.db"
    dbx.files_download_to_file(str(out), "id:" + md.id[3:])
    assert out.read_bytes() == data
    meta = dbx.files_get_metadata("/backups/STORE ONE.db")
    assert isinstance(meta, sdk.files.FileMetadata) and meta.id == md.id
    folder = dbx.files_get_metadata("/backups")
    assert isinstance(folder, sdk.files.FolderMetadata) and folder.path_display == "/Backups"
    # the upload result carries no ".tag" (FileMetadata struct), listings do
    up = [e for e in emu.log() if e["route"] == "/2/files/upload"]
    assert up and up[-1]["arg"]["content_hash"] == md.content_hash


def test_upload_session_20mib_in_4mib_chunks(sdk, dbx, emu):
    data = os.urandom(20 * MiB + 12345)
    chunk = 4 * MiB
    files = sdk.files
    start = dbx.files_upload_session_start(data[:chunk])
    offset = chunk
    while len(data) - offset > chunk:
        cursor = files.UploadSessionCursor(session_id=start.session_id, offset=offset)
        dbx.files_upload_session_append_v2(data[offset:offset + chunk], cursor)
        offset += chunk
    cursor = files.UploadSessionCursor(session_id=start.session_id, offset=offset)
    commit = files.CommitInfo(path="/big/store.db", mode=files.WriteMode.overwrite)
    md = dbx.files_upload_session_finish(data[offset:], cursor, commit)
    assert md.size == len(data)
    assert md.content_hash == dropbox_content_hash(data)
    _, resp = dbx.files_download("/big/store.db")
    assert hashlib.sha256(resp.content).digest() == hashlib.sha256(data).digest()
    appends = [e for e in emu.log() if e["route"] == "/2/files/upload_session/append_v2"]
    assert [e["arg"]["cursor"]["offset"] for e in appends] == [4 * MiB * i for i in range(1, 5)]
    assert all(e["bytes_in"] == chunk for e in appends)
    # the session is gone after finish
    with pytest.raises(sdk.exceptions.ApiError) as ei:
        dbx.files_upload_session_finish(b"", cursor, commit)
    assert ei.value.error.is_lookup_failed() and ei.value.error.get_lookup_failed().is_not_found()


def test_upload_session_incorrect_offset_and_close(sdk, dbx):
    files = sdk.files
    s = dbx.files_upload_session_start(b"a" * 1000)
    bad = files.UploadSessionCursor(session_id=s.session_id, offset=10)
    with pytest.raises(sdk.exceptions.ApiError) as ei:
        dbx.files_upload_session_append_v2(b"b" * 10, bad)
    err = ei.value.error
    assert err.is_incorrect_offset() and err.get_incorrect_offset().correct_offset == 1000
    good = files.UploadSessionCursor(session_id=s.session_id, offset=1000)
    dbx.files_upload_session_append_v2(b"b" * 10, good, close=True)
    with pytest.raises(sdk.exceptions.ApiError) as ei:
        dbx.files_upload_session_append_v2(b"c", files.UploadSessionCursor(s.session_id, 1010))
    assert ei.value.error.is_closed()
    commit = files.CommitInfo(path="/x.bin")
    with pytest.raises(sdk.exceptions.ApiError) as ei:
        dbx.files_upload_session_finish(b"", bad, commit)
    lf = ei.value.error.get_lookup_failed()
    assert lf.is_incorrect_offset() and lf.get_incorrect_offset().correct_offset == 1010
    md = dbx.files_upload_session_finish(b"", files.UploadSessionCursor(s.session_id, 1010),
                                         commit)
    assert md.size == 1010
    with pytest.raises(sdk.exceptions.ApiError) as ei:
        dbx.files_upload_session_append_v2(b"x", files.UploadSessionCursor("nope", 0))
    assert ei.value.error.is_not_found()


def test_content_hash_mismatch(sdk, dbx):
    with pytest.raises(sdk.exceptions.ApiError) as ei:
        dbx.files_upload(b"data", "/h.bin", content_hash="0" * 64)
    assert ei.value.error.is_content_hash_mismatch()
    with pytest.raises(sdk.exceptions.ApiError):
        dbx.files_get_metadata("/h.bin")


def test_list_folder_pagination_and_changes(sdk, dbx, emu):
    names = ["f%02d.txt" % i for i in range(10)]
    for n in names:
        dbx.files_upload(n.encode(), "/many/" + n)
    dbx.files_create_folder_v2("/many/Sub")
    dbx.files_upload(b"deep", "/many/Sub/deep.txt")
    res = dbx.files_list_folder("/many")
    assert res.has_more and len(res.entries) == 3  # server page size 3
    seen = list(res.entries)
    pages = 1
    while res.has_more:
        res = dbx.files_list_folder_continue(res.cursor)
        assert len(res.entries) <= 3
        seen += res.entries
        pages += 1
    assert pages == 4
    assert sorted(e.name for e in seen) == sorted(names + ["Sub"])
    assert {type(e).__name__ for e in seen} == {"FileMetadata", "FolderMetadata"}
    # limit below the page size is honoured
    res2 = dbx.files_list_folder("/many", limit=2)
    assert len(res2.entries) == 2 and res2.has_more
    # recursive: the folder itself, its children, and the grandchild
    rec = dbx.files_list_folder("/many", recursive=True, limit=2000)
    allp = [e.path_lower for e in rec.entries]
    while rec.has_more:
        rec = dbx.files_list_folder_continue(rec.cursor)
        allp += [e.path_lower for e in rec.entries]
    assert "/many" in allp and "/many/sub/deep.txt" in allp and len(allp) == 13
    # after the listing: continue reports what changed since
    dbx.files_upload(b"new", "/many/new.txt")
    dbx.files_delete_v2("/many/f00.txt")
    changes = dbx.files_list_folder_continue(res.cursor)
    kinds = {e.path_lower: type(e).__name__ for e in changes.entries}
    assert kinds == {"/many/new.txt": "FileMetadata", "/many/f00.txt": "DeletedMetadata"}
    # a cursor from before a reset is reset
    emu.control("reset")
    with pytest.raises(sdk.exceptions.ApiError) as ei:
        dbx.files_list_folder_continue(changes.cursor)
    assert ei.value.error.is_reset()


def test_delete(sdk, dbx):
    dbx.files_upload(b"1", "/d/a.txt")
    dbx.files_upload(b"2", "/d/sub/b.txt")
    r = dbx.files_delete_v2("/d/A.TXT")
    assert isinstance(r.metadata, sdk.files.FileMetadata) and r.metadata.name == "a.txt"
    with pytest.raises(sdk.exceptions.ApiError) as ei:
        dbx.files_get_metadata("/d/a.txt")
    assert ei.value.error.get_path().is_not_found()
    deleted = dbx.files_get_metadata("/d/a.txt", include_deleted=True)
    assert isinstance(deleted, sdk.files.DeletedMetadata)
    with pytest.raises(sdk.exceptions.ApiError) as ei:
        dbx.files_delete_v2("/d/a.txt")
    assert ei.value.error.is_path_lookup() and ei.value.error.get_path_lookup().is_not_found()
    r = dbx.files_delete_v2("/d")  # folders go with their contents
    assert isinstance(r.metadata, sdk.files.FolderMetadata)
    assert dbx.files_list_folder("").entries == []


def test_error_tags_parse_in_sdk(sdk, dbx):
    ApiError = sdk.exceptions.ApiError
    with pytest.raises(ApiError) as ei:
        dbx.files_get_metadata("/missing.db")
    assert ei.value.error.is_path() and ei.value.error.get_path().is_not_found()
    with pytest.raises(ApiError) as ei:
        dbx.files_download("/missing.db")
    assert ei.value.error.is_path() and ei.value.error.get_path().is_not_found()
    with pytest.raises(ApiError) as ei:
        dbx.files_list_folder("/missing")
    assert ei.value.error.get_path().is_not_found()

    first = dbx.files_upload(b"one", "/c/store.db")
    with pytest.raises(ApiError) as ei:
        dbx.files_upload(b"two", "/c/store.db", mode=sdk.files.WriteMode.add)
    err = ei.value.error
    assert err.is_path()
    reason = err.get_path().reason
    assert reason.is_conflict() and reason.get_conflict().is_file()
    # same content in add mode is no conflict (no strict_conflict): same rev back
    same = dbx.files_upload(b"one", "/c/store.db", mode=sdk.files.WriteMode.add)
    assert same.rev == first.rev
    with pytest.raises(ApiError):
        dbx.files_upload(b"one", "/c/store.db", mode=sdk.files.WriteMode.add,
                         strict_conflict=True)
    renamed = dbx.files_upload(b"two", "/c/store.db", autorename=True)
    assert renamed.path_display == "/c/store (1).db"
    over = dbx.files_upload(b"three", "/c/store.db", mode=sdk.files.WriteMode.overwrite)
    assert over.rev != first.rev and over.id == first.id and over.size == 5
    with pytest.raises(ApiError) as ei:
        dbx.files_upload(b"four", "/c/store.db", mode=sdk.files.WriteMode.update(first.rev))
    assert ei.value.error.get_path().reason.get_conflict().is_file()
    upd = dbx.files_upload(b"four", "/c/store.db", mode=sdk.files.WriteMode.update(over.rev))
    assert upd.size == 4
    with pytest.raises(ApiError) as ei:
        dbx.files_create_folder_v2("/c")
    assert ei.value.error.get_path().get_conflict().is_folder()
    with pytest.raises(ApiError) as ei:
        dbx.files_upload(b"x", "/c/store.db/inner")
    assert ei.value.error.get_path().reason.get_conflict().is_file_ancestor()
    with pytest.raises(ApiError) as ei:
        dbx.files_upload(b"x", "/c")
    assert ei.value.error.get_path().reason.get_conflict().is_folder()
    with pytest.raises(sdk.exceptions.BadInputError):
        dbx.files_list_folder("/")  # root is "", as Dropbox insists


def test_quota_and_payload_limits(sdk, dbx, emu):
    files = sdk.files
    emu.control("config", {"quota": 1000})
    dbx.files_upload(b"x" * 600, "/q/a.bin")
    with pytest.raises(sdk.exceptions.ApiError) as ei:
        dbx.files_upload(b"y" * 600, "/q/b.bin")
    assert ei.value.error.get_path().reason.is_insufficient_space()
    s = dbx.files_upload_session_start(b"z" * 600)
    with pytest.raises(sdk.exceptions.ApiError) as ei:
        dbx.files_upload_session_finish(b"", files.UploadSessionCursor(s.session_id, 600),
                                        files.CommitInfo(path="/q/c.bin"))
    assert ei.value.error.get_path().is_insufficient_space()
    # overwriting frees the old size
    dbx.files_upload(b"w" * 900, "/q/a.bin", mode=files.WriteMode.overwrite)
    emu.control("config", {"quota": None, "max_request_bytes": 1024})
    with pytest.raises(sdk.exceptions.ApiError) as ei:
        dbx.files_upload(b"p" * 2048, "/q/big.bin")
    assert ei.value.error.is_payload_too_large()


# ---------------------------------------------------------------- OAuth


def test_pkce_flow_refresh_and_expiry(sdk, emu):
    app_key = emu.info["app_key"]
    flow = sdk.DropboxOAuth2FlowNoRedirect(app_key, use_pkce=True, token_access_type="offline")
    url = flow.start()
    parts = urllib.parse.urlsplit(url)
    assert parts.netloc == "127.0.0.1:%d" % emu.info["port"] and parts.path == "/oauth2/authorize"
    q = urllib.parse.parse_qs(parts.query)
    assert q["code_challenge_method"] == ["S256"] and q["token_access_type"] == ["offline"]
    # instead of a browser: GET the authorize URL, the code is in the body
    with urllib.request.urlopen(url, context=emu.ctx, timeout=30) as r:
        code = json.loads(r.read())["code"]
    result = flow.finish(code)
    assert result.refresh_token and result.access_token.startswith("sl.")
    assert result.account_id == emu.info["account_id"] and result.expires_at is not None
    # a code is single-use
    with pytest.raises(Exception):
        flow.finish(code)
    # a code bound to another challenge fails the S256 check
    other = sdk.DropboxOAuth2FlowNoRedirect(app_key, use_pkce=True, token_access_type="offline")
    code2 = emu.control("authorize", query={"code_challenge": flow.code_challenge,
                                            "code_challenge_method": "S256",
                                            "token_access_type": "offline"})["code"]
    with pytest.raises(Exception) as ei:
        other.finish(code2)
    assert "400" in str(ei.value)

    d = sdk.Dropbox(oauth2_refresh_token=result.refresh_token, app_key=app_key)
    since = emu.last_seq()
    assert d.users_get_current_account().account_id == emu.info["account_id"]
    first = [(e["route"], e["status"]) for e in emu.log(since)]
    assert first == [("/oauth2/token", 200), ("/2/users/get_current_account", 200)]

    emu.control("expire_tokens")
    since = emu.last_seq()
    d.files_upload(b"after expiry", "/t.txt")  # the SDK refreshes on expired_access_token
    seen = [(e["route"], e["status"]) for e in emu.log(since)]
    assert seen == [("/2/files/upload", 401), ("/oauth2/token", 200), ("/2/files/upload", 200)]
    d.close()


def test_refresh_via_control_route_code(sdk, emu):
    """The control route issues a code for a challenge; the SDK flow finishes it."""
    flow = sdk.DropboxOAuth2FlowNoRedirect(emu.info["app_key"], use_pkce=True,
                                           token_access_type="offline")
    flow.start()
    code = emu.control("authorize", query={"code_challenge": flow.code_challenge,
                                           "code_challenge_method": "S256",
                                           "token_access_type": "offline"})["code"]
    result = flow.finish(code)
    assert result.refresh_token


def test_revoked_refresh_token_gives_auth_error(sdk, emu):
    tok = emu.token()
    app_key = emu.info["app_key"]
    d = sdk.Dropbox(oauth2_refresh_token=tok["refresh_token"], app_key=app_key)
    d.users_get_current_account()
    assert emu.control("revoke_refresh_token", {"refresh_token": tok["refresh_token"]})["revoked"]
    with pytest.raises(sdk.exceptions.AuthError) as ei:
        d.users_get_current_account()  # its access token went with the refresh token
    assert ei.value.error.is_invalid_access_token()
    fresh = sdk.Dropbox(oauth2_refresh_token=tok["refresh_token"], app_key=app_key)
    since = emu.last_seq()
    with pytest.raises(sdk.exceptions.AuthError):
        fresh.users_get_current_account()  # refresh: 400 invalid_grant -> AuthError
    assert [(e["route"], e["status"]) for e in emu.log(since)] == [("/oauth2/token", 400)]
    d.close()
    fresh.close()


def test_unknown_and_expired_access_tokens(sdk, emu):
    with pytest.raises(sdk.exceptions.AuthError) as ei:
        sdk.Dropbox(oauth2_access_token="sl.bogus").users_get_current_account()
    assert ei.value.error.is_invalid_access_token()
    emu.control("config", {"token_lifetime": 1})
    tok = emu.token()["access_token"]
    time.sleep(1.2)
    with pytest.raises(sdk.exceptions.AuthError) as ei:
        sdk.Dropbox(oauth2_access_token=tok).users_get_current_account()
    assert ei.value.error.is_expired_access_token()


# ---------------------------------------------------------------- faults


def test_429_retried_by_sdk_then_rate_limit_error(sdk, dbx, emu):
    dbx.files_upload(b"x", "/r.txt")
    emu.control("faults", {"kinds": ["429"], "probability": 1.0, "count": 2, "retry_after": 1,
                           "routes": ["/2/files/get_metadata"]})
    since = emu.last_seq()
    t0 = time.time()
    assert dbx.files_get_metadata("/r.txt").name == "r.txt"  # the SDK waited and retried
    assert time.time() - t0 >= 2.0
    assert [e["status"] for e in emu.log(since)] == [429, 429, 200]
    emu.control("faults", {"kinds": ["429"], "probability": 1.0, "retry_after": 0})
    limited = sdk.Dropbox(oauth2_access_token=emu.token()["access_token"],
                          max_retries_on_rate_limit=1)
    with pytest.raises(sdk.exceptions.RateLimitError) as ei:
        limited.files_get_metadata("/r.txt")
    assert ei.value.error.reason.is_too_many_requests() and ei.value.backoff == 0
    # faults never touch control routes
    emu.control("faults", {"kinds": ["500", "drop"], "probability": 1.0})
    assert emu.control("health", method="GET")["ok"]
    emu.control("faults", {})


def test_409_write_fault_is_the_sdk_upload_error(sdk, dbx, emu):
    emu.control("faults", {"kinds": ["409_write"], "count": 1, "routes": ["/2/files/upload"]})
    with pytest.raises(sdk.exceptions.ApiError) as ei:
        dbx.files_upload(b"x", "/w.txt")
    error = ei.value.error
    assert error.is_path() and error.get_path().reason.is_too_many_write_operations()
    assert dbx.files_upload(b"x", "/w.txt").name == "w.txt"
    emu.control("faults", {})


def test_500_retried_and_drop_seen(sdk, emu):
    import requests
    d = sdk.Dropbox(oauth2_access_token=emu.token()["access_token"], max_retries_on_error=3)
    emu.control("faults", {"kinds": ["500"], "count": 1, "seed": 1})
    since = emu.last_seq()
    d.users_get_current_account()
    assert [e["status"] for e in emu.log(since)] == [500, 200]
    emu.control("faults", {"kinds": ["drop"], "count": 1})
    with pytest.raises(requests.exceptions.ConnectionError):
        d.users_get_current_account()
    d.users_get_current_account()


def test_drop_after_append_then_incorrect_offset(sdk, dbx, emu):
    """The append is applied but its answer lost: the retry learns the right offset."""
    import requests
    files = sdk.files
    s = dbx.files_upload_session_start(b"a" * 100)
    emu.control("faults", {"kinds": ["drop_after"], "count": 1,
                           "routes": ["/2/files/upload_session/append_v2"]})
    cur = files.UploadSessionCursor(s.session_id, 100)
    with pytest.raises(requests.exceptions.ConnectionError):
        dbx.files_upload_session_append_v2(b"b" * 50, cur)
    with pytest.raises(sdk.exceptions.ApiError) as ei:
        dbx.files_upload_session_append_v2(b"b" * 50, cur)
    assert ei.value.error.get_incorrect_offset().correct_offset == 150
    md = dbx.files_upload_session_finish(b"", files.UploadSessionCursor(s.session_id, 150),
                                         files.CommitInfo(path="/s.bin"))
    assert md.content_hash == dropbox_content_hash(b"a" * 100 + b"b" * 50)


def test_corrupt_commit_fault_stores_other_bytes(sdk, dbx, emu):
    """The commit succeeds, but what is stored (and its content_hash) differs from what was sent."""
    data = os.urandom(3000)
    emu.control("faults", {"kinds": ["corrupt_commit"], "count": 2,
                           "routes": ["/2/files/upload", "/2/files/upload_session/finish"]})
    md = dbx.files_upload(data, "/c1.bin")
    assert md.content_hash != dropbox_content_hash(data)
    _, resp = dbx.files_download("/c1.bin")
    assert resp.content[1:] == data[1:] and resp.content[0] == data[0] ^ 0xFF
    assert md.content_hash == dropbox_content_hash(resp.content)
    s = dbx.files_upload_session_start(data)
    md = dbx.files_upload_session_finish(b"", sdk.files.UploadSessionCursor(s.session_id, len(data)),
                                         sdk.files.CommitInfo(path="/c2.bin"))
    assert md.content_hash != dropbox_content_hash(data)
    emu.control("faults", {})


def test_truncate_fault_and_resume_with_range(sdk, dbx, emu):
    import requests
    data = os.urandom(2 * MiB)
    dbx.files_upload(data, "/t.bin")
    emu.control("faults", {"kinds": ["truncate"], "count": 1, "routes": ["/2/files/download"]})
    got = b""
    with pytest.raises(requests.exceptions.RequestException):
        _, resp = dbx.files_download("/t.bin")
        for chunk in resp.iter_content(65536):
            got += chunk
    assert 0 < len(got) < len(data) and data.startswith(got)
    # resume where it broke off (the SDK has no Range parameter: plain requests)
    r = requests.post(emu.url + "/2/files/download",
                      headers={"Authorization": "Bearer " + emu.token()["access_token"],
                               "Dropbox-API-Arg": json.dumps({"path": "/t.bin"}),
                               "Range": "bytes=%d-" % len(got)},
                      verify=emu.info["ca_file"], timeout=30)
    assert r.status_code == 206 and got + r.content == data


# ---------------------------------------------------------------- curl


def test_curl_result_header_and_range(emu):
    tok = emu.token()["access_token"]
    u = emu.url
    data = os.urandom(100000)
    src = os.path.join(emu.info["state_dir"], "curl-src.bin")
    with open(src, "wb") as f:
        f.write(data)
    arg = json.dumps({"path": "/Curl/Datei-\u00fc.bin", "mode": "add"})  # \u00fc escaped
    st, h, body = curl(emu, "-X", "POST", u + "/2/files/upload",
                       "-H", "Content-Type: application/octet-stream",
                       "-H", "Dropbox-API-Arg: " + arg, "--data-binary", "@" + src, token=tok)
    assert st == 200 and h["content-type"] == "application/json"
    up = json.loads(body)
    assert ".tag" not in up and up["name"] == "Datei-\u00fc.bin"
    assert up["content_hash"] == dropbox_content_hash(data)

    st, h, body = curl(emu, "-X", "POST", u + "/2/files/download",
                       "-H", 'Dropbox-API-Arg: {"path":"/curl/DATEI-\\u00fc.bin"}', token=tok)
    assert st == 200 and body == data
    assert h["content-type"] == "application/octet-stream"
    res = json.loads(h["dropbox-api-result"])
    assert all(ord(c) < 128 for c in h["dropbox-api-result"])  # header-safe JSON
    assert res == up

    st, h, body = curl(emu, "-X", "POST", u + "/2/files/download", "-H", "Range: bytes=99000-",
                       "-H", 'Dropbox-API-Arg: {"path":"%s"}' % up["id"], token=tok)
    assert st == 206 and body == data[99000:]
    assert h["content-range"] == "bytes 99000-99999/100000"
    assert json.loads(h["dropbox-api-result"])["rev"] == up["rev"]

    st, h, body = curl(emu, "-X", "POST", u + "/2/files/download", "-H", "Range: bytes=100000-",
                       "-H", 'Dropbox-API-Arg: {"path":"/curl/datei-\\u00fc.bin"}', token=tok)
    assert st == 416

    # GET with the arg URL parameter works too
    st, h, body = curl(emu, u + "/2/files/download?arg="
                       + urllib.parse.quote(json.dumps({"path": up["path_lower"]})), token=tok)
    assert st == 200 and body == data

    # chunked upload body (as libcurl sends from a read callback without a size)
    st, h, body = curl(emu, "-X", "POST", u + "/2/files/upload",
                       "-H", "Content-Type: application/octet-stream",
                       "-H", "Transfer-Encoding: chunked",
                       "-H", 'Dropbox-API-Arg: {"path":"/curl/chunked.bin"}',
                       "--data-binary", "@" + src, token=tok)
    assert st == 200 and json.loads(body)["size"] == len(data)


def test_curl_error_shapes(emu):
    tok = emu.token()["access_token"]
    u = emu.url
    # 400: plain text for malformed input
    st, h, body = curl(emu, "-X", "POST", u + "/2/files/download",
                       "-H", "Dropbox-API-Arg: {not json", token=tok)
    assert st == 400 and h["content-type"].startswith("text/plain")
    assert b"could not decode input as JSON" in body
    # raw UTF-8 in the header is refused (Dropbox wants \uXXXX escapes)
    st, h, body = curl(emu, "-X", "POST", u + "/2/files/download",
                       "-H", 'Dropbox-API-Arg: {"path":"/\xfc"}', token=tok)
    assert st == 400
    # libcurl's default form Content-Type on a download is refused, as by Dropbox
    st, h, body = curl(emu, "-X", "POST", u + "/2/files/download", "-d", "",
                       "-H", 'Dropbox-API-Arg: {"path":"/a"}', token=tok)
    assert st == 400 and b"Content-Type" in body
    # 401: JSON AuthError
    st, h, body = curl(emu, "-X", "POST", u + "/2/users/get_current_account", token="sl.nope")
    assert st == 401 and json.loads(body) == {
        "error_summary": "invalid_access_token/...", "error": {".tag": "invalid_access_token"}}
    # 409: route error JSON
    st, h, body = curl(emu, "-X", "POST", u + "/2/files/get_metadata",
                       "-H", "Content-Type: application/json", "-d", '{"path":"/none"}',
                       token=tok)
    err = json.loads(body)
    assert st == 409 and err["error"] == {".tag": "path", "path": {".tag": "not_found"}}
    assert err["error_summary"].startswith("path/not_found/")
    # 429 with Retry-After and the documented body
    emu.control("faults", {"kinds": ["429"], "count": 1, "retry_after": 1})
    st, h, body = curl(emu, "-X", "POST", u + "/2/users/get_current_account", token=tok)
    assert st == 429 and h["retry-after"] == "1"
    assert json.loads(body)["error"] == {"reason": {".tag": "too_many_requests"},
                                         "retry_after": 1}
    # token endpoint: revoked refresh token
    t = emu.token()
    emu.control("revoke_refresh_token", {"refresh_token": t["refresh_token"]})
    st, h, body = curl(emu, "-X", "POST", u + "/oauth2/token",
                       "-d", "grant_type=refresh_token", "-d",
                       "refresh_token=" + t["refresh_token"],
                       "-d", "client_id=" + emu.info["app_key"])
    assert st == 400 and json.loads(body) == {
        "error": "invalid_grant", "error_description": "refresh token is invalid or revoked"}


def test_foreground_mode_and_stop(tmp_path):
    """Without --daemon: the JSON line comes on stdout, SIGTERM ends it cleanly."""
    pidfile = tmp_path / "fg.pid"
    p = subprocess.Popen([sys.executable, EMULATOR, "--state", str(tmp_path), "--port", "0",
                          "--pidfile", str(pidfile), "--page-size", "5",
                          "--token-lifetime", "60"], stdout=subprocess.PIPE, text=True)
    try:
        info = json.loads(p.stdout.readline())
        assert info["pid"] == p.pid and info["page_size"] == 5
        assert info["api_url"] == "https://127.0.0.1:%d" % info["port"]
        e = Emu(info)
        assert e.control("health", method="GET")["ok"]
    finally:
        p.terminate()
        assert p.wait(timeout=10) == 0
    assert not pidfile.exists()
