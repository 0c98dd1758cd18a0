"""Examples/ServerApp end to end: build it, start it on a free loopback port, write data
through its API, back up, change the data, restore through the admin route, and read the
old data back from the same running process. While the restore holds the swap (the
example's SERVERAPP_TEST_HOLD_SWAP hook), requests must get 503 with Retry-After.
"""
import json
import os
import re
import signal
import subprocess
import tempfile
import threading
import time
import urllib.error
import urllib.parse
import urllib.request

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
EXAMPLE = os.path.join(ROOT, "Examples", "ServerApp")
SWIFT = "/opt/swift/usr/bin/swift" if os.path.exists("/opt/swift/usr/bin/swift") else "swift"


def request(base, method, path, body=None, timeout=60):
    """(status, headers, body text) for one request; HTTP errors are answers, not exceptions."""
    data = body.encode() if isinstance(body, str) else body
    req = urllib.request.Request(base + path, data=data, method=method)
    try:
        with urllib.request.urlopen(req, timeout=timeout) as response:
            return response.status, dict(response.headers), response.read().decode()
    except urllib.error.HTTPError as error:
        return error.code, dict(error.headers), error.read().decode()


def backup_path(name, suffix=""):
    return "/admin/backups/" + urllib.parse.quote(name, safe="") + suffix


@pytest.fixture(scope="module")
def server():
    build = subprocess.run([SWIFT, "build", "--package-path", EXAMPLE], capture_output=True, text=True)
    assert build.returncode == 0, "swift build of Examples/ServerApp failed:\n" + (build.stdout + build.stderr)[-4000:]
    binary = subprocess.run([SWIFT, "build", "--package-path", EXAMPLE, "--show-bin-path"],
                            capture_output=True, text=True, check=True).stdout.strip() + "/ServerApp"

    work = tempfile.mkdtemp(prefix="serverapp-test-")
    env = dict(os.environ, SERVERAPP_TEST_HOLD_SWAP="1")
    process = subprocess.Popen(
        [binary, "--stores", work + "/Stores", "--backups", work + "/backups", "--state", work + "/state",
         "--keep-last", "3", "--host", "127.0.0.1", "--port", "0"],
        stdout=subprocess.PIPE, stderr=open(work + "/server.log", "w"), text=True, env=env)
    # The server prints its real port once it listens; readline blocks until then (or EOF if it dies).
    line = process.stdout.readline()
    match = re.search(r"listening on 127\.0\.0\.1:(\d+)", line)
    assert match, "server did not start: %r\n%s" % (line, open(work + "/server.log").read())
    base = "http://127.0.0.1:%s" % match.group(1)
    yield {"base": base, "process": process, "work": work}

    process.send_signal(signal.SIGTERM)
    try:
        assert process.wait(timeout=30) == 0, "graceful shutdown on SIGTERM"
    finally:
        if process.poll() is None:
            process.kill()
        subprocess.run(["rm", "-rf", work])


def health_pid(base):
    status, _, body = request(base, "GET", "/health")
    assert status == 200, body
    return json.loads(body)["pid"]


def test_restore_through_the_api_without_restarting(server):
    base, process = server["base"], server["process"]
    pid = health_pid(base)
    assert pid == process.pid

    assert request(base, "PUT", "/items/greeting", "hello from before the backup")[0] == 204
    assert request(base, "PUT", "/items/kept", "unchanged")[0] == 204

    status, _, body = request(base, "POST", "/admin/backups")
    assert status == 200, body
    created = json.loads(body)
    name = created["name"]
    assert name.endswith(" Stores.zip") and created["databases"] == 1

    status, _, body = request(base, "GET", "/admin/backups")
    assert status == 200 and name in [b["name"] for b in json.loads(body)["backups"]]

    # Change the data after the backup.
    assert request(base, "PUT", "/items/greeting", "changed after the backup")[0] == 204
    assert request(base, "PUT", "/items/extra", "written after the backup")[0] == 204
    assert request(base, "GET", "/items/greeting")[2] == "changed after the backup"

    # Restore in the background; the server holds it inside willSwap until released.
    restore_answer = {}
    def restore():
        restore_answer["result"] = request(base, "POST", backup_path(name, "/restore"), b"", timeout=300)
    restorer = threading.Thread(target=restore)
    restorer.start()

    # Requests during the swap: the store is paused, so reads and writes get 503 + Retry-After.
    deadline = time.monotonic() + 120
    while True:
        status, headers, body = request(base, "GET", "/items/greeting")
        if status == 503:
            break
        assert status == 200, (status, body)  # before the pause the old data is still served
        assert time.monotonic() < deadline, "the restore never paused the store"
    assert headers.get("Retry-After") == "1"
    assert request(base, "PUT", "/items/greeting", "written during the swap")[0] == 503
    assert request(base, "GET", "/items")[0] == 503
    assert restorer.is_alive(), "the restore is still held in willSwap"
    assert request(base, "GET", "/health")[0] == 200, "routes that do not touch the store keep answering"

    assert request(base, "POST", "/admin/test/release-swap", b"")[0] == 204
    restorer.join(timeout=300)
    assert not restorer.is_alive()
    status, _, body = restore_answer["result"]
    assert status == 200, body
    restored = json.loads(body)
    assert restored["backup"] == name and restored["databasesChecked"] == ["App.sqlite"]

    # Same process, old data back, and the store is writable again.
    assert process.poll() is None and health_pid(base) == pid
    assert request(base, "GET", "/items/greeting")[2] == "hello from before the backup"
    assert request(base, "GET", "/items/kept")[2] == "unchanged"
    assert request(base, "GET", "/items/extra")[0] == 404
    assert request(base, "PUT", "/items/greeting", "after the restore")[0] == 204
    assert request(base, "GET", "/items/greeting")[2] == "after the restore"

    # The replaced store is kept beside it for undo (StoreHelper.undoRestore), nothing else.
    leftovers = [n for n in os.listdir(server["work"]) if n.startswith("Stores_") and n != "Stores_Replaced"]
    assert leftovers == [], "no Stores_New/_Old/_FailedRestore left"


def test_delete_and_bad_names(server):
    base = server["base"]
    status, _, body = request(base, "POST", "/admin/backups")
    assert status == 200, body
    name = json.loads(body)["name"]

    assert request(base, "DELETE", backup_path(name))[0] == 204
    status, _, body = request(base, "GET", "/admin/backups")
    assert name not in [b["name"] for b in json.loads(body)["backups"]]
    assert request(base, "DELETE", backup_path(name))[0] == 404
    assert request(base, "POST", backup_path(name, "/restore"), b"")[0] == 404
    assert request(base, "POST", backup_path("../../etc/passwd", "/restore"), b"")[0] == 400
    # The failed restores never paused the store.
    assert request(base, "GET", "/items/kept")[2] == "unchanged"


def test_back_up_now_goes_through_the_backup_service_and_applies_retention(server):
    base = server["base"]
    status, _, body = request(base, "GET", "/admin/backups")
    before = [b["name"] for b in json.loads(body)["backups"]]
    assert len(before) == 1, "the restore test's backup is left (the other test deleted its own)"

    created = []
    for _ in range(3):
        status, _, body = request(base, "POST", "/admin/backups")
        assert status == 200, body
        created.append(json.loads(body))
    # --keep-last 3: the fourth backup pushes the oldest out, right after it is made.
    assert [c["pruned"] for c in created] == [[], [], before]
    status, _, body = request(base, "GET", "/admin/backups")
    assert [b["name"] for b in json.loads(body)["backups"]] == [c["name"] for c in reversed(created)]

    # The service recorded the run in its state file.
    state = json.load(open(os.path.join(server["work"], "state", "app.json")))
    assert state["lastSuccess"]["backup"] == created[-1]["name"]


def test_metrics_report_the_backups_made_through_the_library(server):
    status, _, body = request(server["base"], "POST", "/admin/backups")
    assert status in (200, 201), body
    status, headers, text = request(server["base"], "GET", "/metrics")
    assert status == 200, text
    success = re.findall(r'^storebackup_backups_total\{[^}]*outcome="success"[^}]*\} (\d+)', text, re.M)
    assert success and int(success[0]) >= 1, text
    assert 'store="app"' in text, text
    last = re.findall(r"^storebackup_last_success_timestamp_seconds\{[^}]*\} ([0-9.e+]+)", text, re.M)
    assert last and abs(float(last[0]) - time.time()) < 3600, text
