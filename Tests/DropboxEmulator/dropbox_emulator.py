#!/usr/bin/env python3
"""A Dropbox HTTP API v2 emulator for storebackup's tests, on loopback only.

    python3 dropbox_emulator.py [--port 0] [--state DIR] [--page-size 3]
                                [--token-lifetime 14400] [--quota BYTES]
                                [--max-request-bytes N] [--app-key K]
                                [--daemon --pidfile F] [--verbose]

One HTTPS server on 127.0.0.1 stands in for api.dropboxapi.com (RPC routes and
/oauth2/token), content.dropboxapi.com (upload and download routes) and
www.dropbox.com (/oauth2/authorize): it routes by path. Its certificate is
issued by a CA made with the openssl CLI into STATE/tls; clients trust
STATE/tls/ca.pem. When it accepts connections it prints one JSON line with
port, pid, ca_file, api_url, content_url, app_key, refresh_token and
access_token (and a few more), and keeps the same object in
STATE/emulator.json (mode 0600).

File contents live on disk under STATE (streamed in and out, never held whole
in memory); metadata, tokens, upload sessions and cursors live in memory, so a
restart starts from an empty Dropbox (the CA and server certificate are kept).

Control routes (no auth, never subject to faults) are under /_emulator/: see
README.md beside this file.

Python 3 standard library only.
"""

import argparse
import base64
import collections
import datetime
import hashlib
import http.server
import json
import os
import random
import re
import secrets
import shutil
import signal
import socket
import ssl
import string
import subprocess
import sys
import tempfile
import threading
import time
import urllib.parse

MiB = 1024 * 1024
BLOCK_SIZE = 4 * MiB  # Dropbox content hash block
IO_CHUNK = 1 * MiB
DEFAULT_MAX_REQUEST = 150 * MiB  # Dropbox's limit for one upload request body
MAX_FILE_SIZE = 350 * 1024 ** 3  # Dropbox's limit for one upload session
MAX_RPC_BODY = 1 * MiB
DRAIN_LIMIT = 512 * MiB  # unread request bodies above this close the connection
CODE_TTL = 600.0
LOG_KEEP = 20000
MAX_CURSORS = 20000
SCOPE = ("account_info.read files.content.read files.content.write "
         "files.metadata.read files.metadata.write")
FAULT_KINDS = ("429", "429_write", "409_write", "500", "503", "drop", "drop_after", "truncate",
               "corrupt_commit", "ignore_range")

# Path patterns of the public API spec, used in 400 messages.
PAT_WRITE = "(/(.|[\\r\\n])*)|(ns:[0-9]+(/(.|[\\r\\n])*)?)"
PAT_WRITE_OR_ID = "(/(.|[\\r\\n])*)|(ns:[0-9]+(/(.|[\\r\\n])*)?)|(id:.*)"
PAT_LIST = "(/(.|[\\r\\n])*)?|id:.*|(ns:[0-9]+(/(.|[\\r\\n])*)?)"
PAT_READ = "(/(.|[\\r\\n])*|id:.*)|(rev:[0-9a-f]{9,})|(ns:[0-9]+(/(.|[\\r\\n])*)?)"
TS_FORMAT = "%Y-%m-%dT%H:%M:%SZ"


def log(msg):
    print("dropbox-emulator: " + msg, file=sys.stderr, flush=True)


def now_ts():
    return datetime.datetime.now(datetime.timezone.utc).strftime(TS_FORMAT)


def header_safe_json(obj):
    """JSON with every non-ASCII character and 0x7F as \\uXXXX (Dropbox's rule for headers)."""
    return json.dumps(obj, ensure_ascii=True).replace("\x7f", "\\u007f")


def rand_alnum(n, alphabet=string.ascii_letters + string.digits):
    return "".join(secrets.choice(alphabet) for _ in range(n))


class ContentHasher:
    """Dropbox content hash: SHA-256 of each 4 MiB block, then SHA-256 of the
    concatenated block digests, as lowercase hex. Fed incrementally."""

    def __init__(self):
        self._overall = hashlib.sha256()
        self._block = hashlib.sha256()
        self._in_block = 0

    def update(self, data):
        view = memoryview(data)
        while len(view):
            take = min(len(view), BLOCK_SIZE - self._in_block)
            self._block.update(view[:take])
            self._in_block += take
            view = view[take:]
            if self._in_block == BLOCK_SIZE:
                self._overall.update(self._block.digest())
                self._block = hashlib.sha256()
                self._in_block = 0

    def hexdigest(self):
        overall = self._overall.copy()
        if self._in_block:
            overall.update(self._block.digest())
        return overall.hexdigest()


def content_hash_of_file(path):
    h = ContentHasher()
    with open(path, "rb") as f:
        while True:
            chunk = f.read(IO_CHUNK)
            if not chunk:
                break
            h.update(chunk)
    return h.hexdigest()


def corrupt_first_byte(path):
    """Flip the first byte of PATH (the corrupt_commit fault); returns its new content hash."""
    with open(path, "r+b") as f:
        first = f.read(1)
        if first:
            f.seek(0)
            f.write(bytes([first[0] ^ 0xFF]))
    return content_hash_of_file(path)


# ---------------------------------------------------------------- errors


class BadRequest(Exception):
    """400 with a plain-text body, as Dropbox sends for malformed input."""


class RouteError(Exception):
    """409 with {"error_summary", "error"} (an endpoint-specific error)."""

    def __init__(self, error, status=409):
        super().__init__(error)
        self.error = error
        self.status = status


class AuthFailure(Exception):
    """401 with an AuthError union."""

    def __init__(self, tag):
        super().__init__(tag)
        self.tag = tag


class ClientGone(Exception):
    """The client closed the connection before sending the whole body."""


def error_summary(err):
    """'path/not_found/..' style summary of a tagged union value. Like Dropbox,
    the number of trailing dots varies so clients don't match it exactly."""
    parts = []
    while isinstance(err, dict) and ".tag" in err:
        tag = err[".tag"]
        parts.append(tag)
        nxt = err.get(tag)
        if not isinstance(nxt, dict):
            nxt = next((v for k, v in err.items()
                        if k != ".tag" and isinstance(v, dict) and ".tag" in v), None)
        err = nxt
    return "/".join(parts) + "/" + "." * random.randint(1, 3)


def tag(name, **fields):
    d = {".tag": name}
    d.update(fields)
    return d


def lookup_error(kind):  # LookupError
    return tag(kind)


def write_error(kind, conflict=None):  # WriteError
    if kind == "conflict":
        return tag("conflict", conflict=tag(conflict))
    return tag(kind)


# ---------------------------------------------------------------- request bodies


class BodyReader:
    """Reads a request body framed by Content-Length or chunked encoding."""

    def __init__(self, rfile, headers):
        self.rfile = rfile
        self.total = 0
        te = (headers.get("Transfer-Encoding") or "").lower()
        self.chunked = "chunked" in te
        self.done = False
        self.length = None
        self._chunk_left = 0
        if not self.chunked:
            cl = headers.get("Content-Length")
            if cl is None or cl.strip() == "":
                self.length = 0
            else:
                try:
                    self.length = int(cl)
                except ValueError:
                    raise BadRequest("Bad Content-Length header") from None
                if self.length < 0:
                    raise BadRequest("Bad Content-Length header")
            self._left = self.length
            self.done = self._left == 0

    def read(self, n=IO_CHUNK):
        """Up to n bytes; b"" at the end of the body; ClientGone if cut short."""
        if self.done:
            return b""
        if not self.chunked:
            data = self.rfile.read(min(n, self._left))
            if not data:
                raise ClientGone()
            self._left -= len(data)
            self.total += len(data)
            if self._left == 0:
                self.done = True
            return data
        if self._chunk_left == 0:
            line = self.rfile.readline(1024)
            if not line:
                raise ClientGone()
            try:
                size = int(line.split(b";")[0].strip(), 16)
            except ValueError:
                raise ClientGone() from None
            if size == 0:
                while True:  # trailers
                    t = self.rfile.readline(8192)
                    if not t:
                        raise ClientGone()
                    if t in (b"\r\n", b"\n"):
                        break
                self.done = True
                return b""
            self._chunk_left = size
        data = self.rfile.read(min(n, self._chunk_left))
        if not data:
            raise ClientGone()
        self._chunk_left -= len(data)
        self.total += len(data)
        if self._chunk_left == 0:
            if self.rfile.readline(16) not in (b"\r\n", b"\n"):
                raise ClientGone()
        return data

    def read_all(self, limit):
        parts = []
        size = 0
        while True:
            data = self.read()
            if not data:
                return b"".join(parts)
            size += len(data)
            if size > limit:
                raise BadRequest("request body too large")
            parts.append(data)

    def drain(self, limit=DRAIN_LIMIT):
        """Read and drop what is left. False if more than limit was left (close then)."""
        if not self.done and not self.chunked and self._left > limit:
            return False
        dropped = 0
        while not self.done:
            data = self.read()
            dropped += len(data)
            if dropped > limit:
                return False
        return True


class Response:
    def __init__(self, status, body=b"", content_type=None, headers=None, file=None,
                 file_start=0, file_len=0):
        self.status = status
        self.body = body
        self.headers = list(headers or [])
        if content_type:
            self.headers.append(("Content-Type", content_type))
        self.file = file  # open binary file to stream file_len bytes from file_start
        self.file_start = file_start
        self.file_len = file_len

    @property
    def length(self):
        return self.file_len if self.file is not None else len(self.body)


def json_response(status, obj, headers=None):
    return Response(status, json.dumps(obj).encode("utf-8"), "application/json", headers)


def text_response(status, text, headers=None):
    return Response(status, text.encode("utf-8"), "text/plain; charset=utf-8", headers)


# ---------------------------------------------------------------- argument checks


class Args:
    """Checks one route's JSON argument and makes Dropbox-style 400 messages."""

    def __init__(self, fn, where, obj):
        self.fn = fn
        self.where = where
        if not isinstance(obj, dict):
            self.bad("expected object, got %s" % json_type(obj))
        self.obj = obj

    def bad(self, detail):
        raise BadRequest('Error in call to API function "%s": %s: %s' % (self.fn, self.where, detail))

    def get(self, name, kind, default=None, required=False):
        if name not in self.obj or self.obj[name] is None:
            if required:
                self.bad("missing required field '%s'" % name)
            return default
        v = self.obj[name]
        ok = {
            "str": isinstance(v, str),
            "bool": isinstance(v, bool),
            "int": isinstance(v, int) and not isinstance(v, bool),
            "obj": isinstance(v, dict),
            "list": isinstance(v, list),
        }[kind]
        if not ok:
            self.bad("%s: expected %s, got %s" % (name, {"str": "string", "bool": "boolean",
                                                         "int": "integer", "obj": "object",
                                                         "list": "list"}[kind], json_type(v)))
        return v

    def path(self, name, pattern, allow_root=False, allow_id=True, allow_rev=False):
        p = self.get(name, "str", required=True)
        ok = p.startswith("/") or (p == "" and allow_root) or (allow_id and p.startswith("id:")) \
            or (allow_rev and re.fullmatch(r"rev:[0-9a-f]{9,}", p) is not None) \
            or re.fullmatch(r"ns:[0-9]+(/.*)?", p, re.S) is not None
        if not ok:
            self.bad("%s: '%s' did not match pattern '%s'" % (name, p, pattern))
        if p == "/" and allow_root:
            self.bad('%s: Specify the root folder as an empty string rather than as "/".' % name)
        if p.startswith("ns:"):
            self.bad("%s: namespace paths (ns:) are not supported by the emulator" % name)
        return p

    def union(self, name, allowed_void, allowed_valued=(), default=None):
        v = self.obj.get(name)
        if v is None:
            return default
        if isinstance(v, str):
            if v in allowed_void:
                return (v, None)
            if v in allowed_valued:
                self.bad("%s: tag '%s' requires a value" % (name, v))
            self.bad("%s: unknown tag '%s'" % (name, v))
        if not isinstance(v, dict) or not isinstance(v.get(".tag"), str):
            self.bad("%s: expected union, got %s" % (name, json_type(v)))
        t = v[".tag"]
        if t in allowed_void:
            return (t, None)
        if t in allowed_valued:
            if t not in v:
                self.bad("%s: missing value for tag '%s'" % (name, t))
            return (t, v[t])
        self.bad("%s: unknown tag '%s'" % (name, t))

    def timestamp(self, name):
        v = self.get(name, "str")
        if v is None:
            return None
        try:
            datetime.datetime.strptime(v, TS_FORMAT)
        except ValueError:
            self.bad("%s: timestamp '%s' does not match format '%s'" % (name, v, TS_FORMAT))
        return v

    def content_hash(self, name="content_hash"):
        v = self.get(name, "str")
        if v is not None and len(v) != 64:
            self.bad("%s: '%s' must be 64 characters" % (name, v))
        return v

    def sub(self, name):
        return Args(self.fn, "%s: %s" % (self.where, name), self.get(name, "obj", required=True))


def json_type(v):
    if v is None:
        return "null"
    if isinstance(v, bool):
        return "boolean"
    if isinstance(v, (int, float)):
        return "number"
    if isinstance(v, str):
        return "string"
    if isinstance(v, list):
        return "list"
    return "object"


# ---------------------------------------------------------------- faults


class Faults:
    def __init__(self):
        self.lock = threading.Lock()
        self.clear()

    def clear(self):
        with self.lock:
            self.config = {"probability": 0.0, "kinds": [], "routes": None, "seed": None,
                           "count": None, "retry_after": 1}
            self.rng = random.Random()
            self.injected = 0

    def set(self, cfg):
        if not isinstance(cfg, dict):
            raise BadRequest("faults: expected a JSON object")
        p = cfg.get("probability", 1.0 if cfg.get("kinds") else 0.0)
        if not isinstance(p, (int, float)) or isinstance(p, bool) or not 0 <= p <= 1:
            raise BadRequest("faults: probability must be a number in [0, 1]")
        kinds = cfg.get("kinds", [])
        if isinstance(kinds, str):
            kinds = [kinds]
        if not isinstance(kinds, list) or any(k not in FAULT_KINDS for k in kinds):
            raise BadRequest("faults: kinds must be a list drawn from %s" % ", ".join(FAULT_KINDS))
        routes = cfg.get("routes")
        if routes is not None and (not isinstance(routes, list)
                                   or not all(isinstance(r, str) for r in routes)):
            raise BadRequest("faults: routes must be a list of paths (a trailing * matches a prefix)")
        count = cfg.get("count")
        if count is not None and (not isinstance(count, int) or count < 0):
            raise BadRequest("faults: count must be a non-negative integer")
        retry_after = cfg.get("retry_after", 1)
        if not isinstance(retry_after, int) or retry_after < 0:
            raise BadRequest("faults: retry_after must be a non-negative integer")
        seed = cfg.get("seed")
        with self.lock:
            self.config = {"probability": float(p), "kinds": kinds, "routes": routes,
                           "seed": seed, "count": count, "retry_after": retry_after}
            self.rng = random.Random(seed)
            self.injected = 0

    def snapshot(self):
        with self.lock:
            d = dict(self.config)
            d["injected"] = self.injected
            return d

    def pick(self, route):
        with self.lock:
            c = self.config
            if not c["kinds"] or c["probability"] <= 0:
                return None
            if c["count"] is not None and self.injected >= c["count"]:
                return None
            if c["routes"] is not None and not any(
                    route == r or (r.endswith("*") and route.startswith(r[:-1])) for r in c["routes"]):
                return None
            if self.rng.random() >= c["probability"]:
                return None
            self.injected += 1
            return self.rng.choice(c["kinds"])

    @property
    def retry_after(self):
        with self.lock:
            return self.config["retry_after"]


# ---------------------------------------------------------------- the emulated account


class Emulator:
    def __init__(self, state_dir, app_key, app_secret, page_size, token_lifetime, quota,
                 max_request):
        self.state_dir = state_dir
        self.blob_dir = os.path.join(state_dir, "blobs")
        self.session_dir = os.path.join(state_dir, "sessions")
        self.tmp_dir = os.path.join(state_dir, "tmp")
        self.app_key = app_key
        self.app_secret = app_secret
        self.page_size = page_size
        self.token_lifetime = token_lifetime
        self.quota = quota
        self.max_request = max_request
        self.account_id = "dbid:" + rand_alnum(35, string.ascii_letters + string.digits + "-_")
        self.uid = str(random.randint(10 ** 8, 10 ** 10))
        self.lock = threading.RLock()
        self.faults = Faults()
        self.access_tokens = {}  # token -> {"expires": float|None, "refresh": str|None}
        self.refresh_tokens = {}  # token -> {"client_id", "pkce": bool, "revoked": bool}
        self.codes = {}  # code -> {...}
        self.log_entries = collections.deque(maxlen=LOG_KEEP)
        self.log_seq = 0
        self._counter = 0
        self._reset_storage()

    # -- storage -------------------------------------------------------

    def _reset_storage(self):
        with self.lock:
            for d in (self.blob_dir, self.session_dir, self.tmp_dir):
                shutil.rmtree(d, ignore_errors=True)
                os.makedirs(d, exist_ok=True)
            self.nodes = {}  # path_lower -> node dict
            self.ids = {}  # id -> path_lower
            self.tombstones = {}  # path_lower -> {"display", "seq"}
            self.sessions = {}  # session_id -> {"file", "offset", "closed", "lock"}
            self.cursors = {}  # cursor -> state
            self.seq = 0
            self.epoch = rand_alnum(6)

    def reset(self):
        self._reset_storage()
        self.faults.clear()
        with self.lock:
            self.log_entries.clear()

    def next_counter(self):
        with self.lock:
            self._counter += 1
            return self._counter

    def new_id(self):
        return "id:" + base64.urlsafe_b64encode(secrets.token_bytes(16)).decode().rstrip("=")[:22]

    def new_rev(self):
        return "%08x%09x" % (random.getrandbits(32), self.next_counter())

    def tmp_path(self):
        return os.path.join(self.tmp_dir, "%d-%s" % (self.next_counter(), secrets.token_hex(4)))

    def used_bytes(self):
        with self.lock:
            return sum(n["size"] for n in self.nodes.values() if n["kind"] == "file")

    @staticmethod
    def name_of(display):
        return display.rsplit("/", 1)[-1]

    def metadata(self, pl, with_tag=True):
        n = self.nodes[pl]
        md = {}
        if with_tag:
            md[".tag"] = n["kind"]
        md["name"] = self.name_of(n["display"])
        md["path_lower"] = pl
        md["path_display"] = n["display"]
        md["id"] = n["id"]
        if n["kind"] == "file":
            md.update({
                "client_modified": n["client_modified"],
                "server_modified": n["server_modified"],
                "rev": n["rev"],
                "size": n["size"],
                "is_downloadable": True,
                "content_hash": n["content_hash"],
            })
        return md

    def deleted_metadata(self, pl):
        t = self.tombstones[pl]
        return {".tag": "deleted", "name": self.name_of(t["display"]), "path_lower": pl,
                "path_display": t["display"]}

    def split_path(self, p):
        """'/A/b' -> ('/a/b', '/A/b'), or a malformed_path LookupError/WriteError."""
        if p == "" or p == "/":
            return "", ""
        parts = p.split("/")[1:]
        if any(c in ("", ".", "..") for c in parts) or "\x00" in p:
            return None, None
        return p.lower(), p

    def resolve(self, raw, write=False):
        """Path, id: or rev: to (path_lower, display) of an existing or wanted node.
        Raises RouteError-ready LookupError/WriteError values as ('malformed_path'|'not_found')."""
        if raw.startswith("id:"):
            pl = self.ids.get(raw)
            if pl is None:
                raise _Lookup("not_found")
            return pl, self.nodes[pl]["display"]
        if raw.startswith("rev:"):
            rev = raw[4:]
            for pl, n in self.nodes.items():
                if n["kind"] == "file" and n["rev"] == rev:
                    return pl, n["display"]
            raise _Lookup("not_found")
        pl, display = self.split_path(raw)
        if pl is None:
            raise _Lookup("malformed_path")
        # Cased path: the stored case of existing ancestors, the given last component.
        parts = display.split("/")
        for i in range(1, len(parts) - 1):
            anc = "/".join(parts[: i + 1]).lower()
            n = self.nodes.get(anc)
            if n is not None:
                parts[: i + 1] = n["display"].split("/")
        display = "/".join(parts)
        return pl, display

    def ancestors(self, pl):
        parts = pl.split("/")
        return ["/".join(parts[:i]) for i in range(2, len(parts))]

    def children(self, folder_pl, recursive):
        prefix = folder_pl + "/"
        out = []
        for pl in self.nodes:
            if not pl.startswith(prefix):
                continue
            if not recursive and "/" in pl[len(prefix):]:
                continue
            out.append(pl)
        return sorted(out)

    def touch(self, node):
        self.seq += 1
        node["seq"] = self.seq

    def make_folders(self, pl, display):
        """Create pl and any missing ancestors as folders. Caller checked for conflicts."""
        parts_l = pl.split("/")
        parts_d = display.split("/")
        for i in range(2, len(parts_l) + 1):
            apl = "/".join(parts_l[:i])
            if apl in self.nodes:
                continue
            node = {"kind": "folder", "display": "/".join(parts_d[:i]), "id": self.new_id()}
            self.touch(node)
            self.nodes[apl] = node
            self.ids[node["id"]] = apl
            self.tombstones.pop(apl, None)

    def ancestor_conflict(self, pl):
        for anc in self.ancestors(pl):
            n = self.nodes.get(anc)
            if n is not None and n["kind"] == "file":
                return True
        return False

    def autorename(self, pl, display, folder=False):
        """Dropbox's autorename: 'name (1).ext', 'name (2).ext', ... (folders: 'name (1)')."""
        parent_d, name = display.rsplit("/", 1)
        stem, dot, ext = name.rpartition(".")
        if folder or not stem:
            stem, dot, ext = name, "", ""
        for i in range(1, 10000):
            cand = "%s/%s (%d)%s%s" % (parent_d, stem, i, dot, ext)
            if cand.lower() not in self.nodes:
                return cand.lower(), cand
        raise RouteError(tag("path", path=write_error("conflict", "file")))

    def commit_file(self, target, mode, autorename, client_modified, strict_conflict, tmp,
                    size, chash):
        """Move tmp into place at target per Dropbox's write modes. Returns
        FileMetadata, or raises _Write(WriteError). tmp is consumed unless _Write."""
        with self.lock:
            try:
                pl, display = self.resolve(target, write=True)
            except _Lookup:
                raise _Write(write_error("malformed_path")) from None
            if pl == "":
                raise _Write(write_error("malformed_path"))
            if self.ancestor_conflict(pl):
                raise _Write(write_error("conflict", "file_ancestor"))
            mode_tag, mode_rev = mode
            existing = self.nodes.get(pl)
            replace = False
            if existing is not None:
                if existing["kind"] == "folder":
                    if not autorename:
                        raise _Write(write_error("conflict", "folder"))
                    pl, display = self.autorename(pl, display)
                    existing = None
                else:
                    same = existing["content_hash"] == chash
                    if mode_tag == "add":
                        ok = same and not strict_conflict
                    elif mode_tag == "overwrite":
                        ok = True
                    else:  # update
                        ok = existing["rev"] == mode_rev
                    if ok and same:
                        os.unlink(tmp)
                        return self.metadata(pl, with_tag=False)
                    if ok:
                        replace = True
                    elif autorename:
                        pl, display = self.autorename(pl, display)
                        existing = None
                    else:
                        raise _Write(write_error("conflict", "file"))
            elif mode_tag == "update" and strict_conflict:
                raise _Write(write_error("conflict", "file"))
            if self.quota is not None:
                freed = existing["size"] if replace else 0
                if self.used_bytes() - freed + size > self.quota:
                    raise _Write(write_error("insufficient_space"))
            rev = self.new_rev()
            blob = os.path.join(self.blob_dir, rev)
            os.replace(tmp, blob)
            ts = now_ts()
            if replace:
                old_blob = existing["blob"]
                node = existing
            else:
                old_blob = None
                parent_pl = pl.rsplit("/", 1)[0]
                if parent_pl:
                    self.make_folders(parent_pl, display.rsplit("/", 1)[0])
                node = {"kind": "file", "id": self.new_id()}
                self.nodes[pl] = node
                self.ids[node["id"]] = pl
                self.tombstones.pop(pl, None)
            node.update({"display": display, "rev": rev, "size": size, "content_hash": chash,
                         "client_modified": client_modified or ts, "server_modified": ts,
                         "blob": blob})
            self.touch(node)
            if old_blob:
                try:
                    os.unlink(old_blob)
                except FileNotFoundError:
                    pass
            return self.metadata(pl, with_tag=False)

    def delete(self, pl):
        """Remove pl (and everything under it); returns its Metadata."""
        md = self.metadata(pl)
        victims = [pl] + self.children(pl, True) if self.nodes[pl]["kind"] == "folder" else [pl]
        for v in victims:
            n = self.nodes.pop(v)
            self.ids.pop(n["id"], None)
            self.seq += 1
            self.tombstones[v] = {"display": n["display"], "seq": self.seq}
            if n["kind"] == "file":
                try:
                    os.unlink(n["blob"])
                except FileNotFoundError:
                    pass
        return md

    # -- tokens ---------------------------------------------------------

    def issue_tokens(self, client_id, pkce, access_type="offline"):
        with self.lock:
            access = "sl." + secrets.token_urlsafe(96)
            refresh = None
            if access_type == "offline":
                refresh = secrets.token_urlsafe(48)
                self.refresh_tokens[refresh] = {"client_id": client_id, "pkce": pkce,
                                                "revoked": False}
            expires = None if access_type == "legacy" else time.time() + self.token_lifetime
            self.access_tokens[access] = {"expires": expires, "refresh": refresh}
            return access, refresh

    def check_access_token(self, token):
        with self.lock:
            t = self.access_tokens.get(token)
            if t is None:
                raise AuthFailure("invalid_access_token")
            if t["expires"] is not None and time.time() >= t["expires"]:
                raise AuthFailure("expired_access_token")

    def expire_access_tokens(self):
        with self.lock:
            n = 0
            for t in self.access_tokens.values():
                t["expires"] = time.time() - 1
                n += 1
            return n

    def revoke_refresh_token(self, refresh, keep_access=False):
        with self.lock:
            r = self.refresh_tokens.get(refresh)
            if r is None:
                return False
            r["revoked"] = True
            if not keep_access:
                for tok in [k for k, v in self.access_tokens.items() if v["refresh"] == refresh]:
                    del self.access_tokens[tok]
            return True

    def new_code(self, client_id, challenge, method, access_type, redirect_uri):
        code = secrets.token_urlsafe(32)
        with self.lock:
            self.codes[code] = {"client_id": client_id, "challenge": challenge, "method": method,
                                "access_type": access_type or "online",
                                "redirect_uri": redirect_uri, "expires": time.time() + CODE_TTL}
        return code

    # -- request log ----------------------------------------------------

    def log_request(self, entry):
        with self.lock:
            self.log_seq += 1
            entry["seq"] = self.log_seq
            self.log_entries.append(entry)


class _Lookup(Exception):
    def __init__(self, kind):
        super().__init__(kind)
        self.kind = kind


class _Write(Exception):
    def __init__(self, error):
        super().__init__(error)
        self.error = error


# ---------------------------------------------------------------- routes

RPC_ROUTES = {
    "/2/files/create_folder_v2": "create_folder",
    "/2/files/list_folder": "list_folder",
    "/2/files/list_folder/continue": "list_folder_continue",
    "/2/files/delete_v2": "delete",
    "/2/files/get_metadata": "get_metadata",
    "/2/users/get_current_account": "get_current_account",
    "/2/users/get_space_usage": "get_space_usage",
    "/2/check/user": "check_user",
    "/2/auth/token/revoke": "token_revoke",
}
VOID_ARG_ROUTES = {"/2/users/get_current_account", "/2/users/get_space_usage",
                   "/2/auth/token/revoke"}
UPLOAD_ROUTES = {
    "/2/files/upload": "upload",
    "/2/files/upload_session/start": "session_start",
    "/2/files/upload_session/append_v2": "session_append",
    "/2/files/upload_session/finish": "session_finish",
}
DOWNLOAD_ROUTES = {"/2/files/download": "download"}
RPC_CONTENT_TYPES = ("application/json", "application/json; charset=utf-8",
                     "text/plain; charset=dropbox-cors-hack")
UPLOAD_CONTENT_TYPES = ("application/octet-stream", "text/plain; charset=dropbox-cors-hack")
DOWNLOAD_CONTENT_TYPES = ("", "text/plain", "text/plain; charset=utf-8",
                          "application/octet-stream", "application/octet-stream; charset=utf-8",
                          "text/plain; charset=dropbox-cors-hack")


class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "DropboxEmulator/1.0"

    def version_string(self):
        return self.server_version

    # quiet unless --verbose
    def log_message(self, fmt, *args):
        if self.server.verbose:
            log("%s %s" % (self.address_string(), fmt % args))

    def log_request(self, code="-", size="-"):
        if self.server.verbose:
            super().log_request(code, size)

    @property
    def emu(self):
        return self.server.emu

    def do_GET(self):
        self.dispatch("GET")

    def do_POST(self):
        self.dispatch("POST")

    def do_PUT(self):
        self.dispatch("PUT")

    def do_DELETE(self):
        self.dispatch("DELETE")

    # -- plumbing -----------------------------------------------------------

    def dispatch(self, method):
        url = urllib.parse.urlsplit(self.path)
        route = url.path
        self.query = urllib.parse.parse_qs(url.query, keep_blank_values=True)
        try:
            self.body = BodyReader(self.rfile, self.headers)
        except BadRequest as e:
            self.close_connection = True
            self.send(text_response(400, str(e)))
            return
        if route.startswith("/_emulator/") or route == "/_emulator":
            self.run_control(method, route)
            return
        entry = {"time": round(time.time(), 3), "method": method, "route": route,
                 "status": None, "fault": None}
        rng = self.headers.get("Range")
        if rng:
            entry["range"] = rng
        self.log_entry = entry
        fault = self.emu.faults.pick(route)
        entry["fault"] = fault
        self.fault = fault
        resp = None
        try:
            if fault in ("429", "429_write", "409_write", "500", "503", "drop"):
                if not self.body.drain():
                    self.close_connection = True
                if fault != "drop":
                    resp = self.fault_response(fault)
            else:
                try:
                    resp = self.run_route(method, route)
                except ClientGone:
                    raise
                except Exception as e:  # a bug here: answer 500 and say so in the log
                    log("internal error in %s: %r" % (route, e))
                    import traceback
                    traceback.print_exc(file=sys.stderr)
                    resp = text_response(500, "Internal Server Error (emulator bug: %r)" % (e,))
                    self.close_connection = True
                if not self.body.drain():
                    self.close_connection = True
        except ClientGone:
            entry["client_gone"] = True
            resp = None
            fault = "drop"
        entry["bytes_in"] = self.body.total
        # Body bytes the answer carries (half of them with "truncate"), for tests that
        # count what a client downloaded.
        entry["bytes_out"] = 0 if resp is None else (resp.length // 2 if fault == "truncate" else resp.length)
        entry["status"] = resp.status if resp is not None and fault != "drop_after" else 0
        if resp is not None:
            entry["http_status"] = resp.status
        self.emu.log_request(entry)
        if resp is None or fault == "drop_after":
            if resp is not None and resp.file is not None:
                resp.file.close()
            self.abort()
            return
        self.send(resp, truncate=(fault == "truncate"))

    def abort(self):
        self.close_connection = True
        self.server.abort_connection(self.connection)

    def send(self, resp, truncate=False):
        try:
            self.send_response(resp.status)
            for k, v in resp.headers:
                self.send_header(k, v)
            self.send_header("X-Dropbox-Request-Id", secrets.token_hex(16))
            self.send_header("Content-Length", str(resp.length))
            if self.close_connection:
                self.send_header("Connection", "close")
            self.end_headers()
            limit = resp.length // 2 if truncate else resp.length
            if resp.file is None:
                self.wfile.write(resp.body[:limit])
            else:
                resp.file.seek(resp.file_start)
                left = limit
                while left > 0:
                    data = resp.file.read(min(IO_CHUNK, left))
                    if not data:
                        break
                    self.wfile.write(data)
                    left -= len(data)
            self.wfile.flush()
        except (BrokenPipeError, ConnectionResetError, ssl.SSLError, socket.timeout, OSError):
            self.close_connection = True
        finally:
            if resp.file is not None:
                resp.file.close()
        if truncate:
            self.abort()

    def fault_response(self, fault):
        retry_after = self.emu.faults.retry_after
        if fault in ("429", "429_write"):
            reason = "too_many_requests" if fault == "429" else "too_many_write_operations"
            body = {"error_summary": reason + "/...",
                    "error": {"reason": {".tag": reason}, "retry_after": retry_after}}
            return json_response(429, body, [("Retry-After", str(retry_after))])
        if fault == "409_write":
            # An upload route's UploadError: path (UploadWriteFailed) whose WriteError reason is
            # too_many_write_operations, which Dropbox documents as "retry the request".
            body = {"error_summary": "path/too_many_write_operations/...",
                    "error": {".tag": "path", "reason": {".tag": "too_many_write_operations"},
                              "upload_session_id": "pid_upload_session:" + secrets.token_hex(8)}}
            return json_response(409, body)
        if fault == "503":
            return text_response(503, "Service Unavailable (injected fault)",
                                 [("Retry-After", str(retry_after))])
        return text_response(500, "Internal Server Error (injected fault)")

    # -- API routes ---------------------------------------------------------

    def run_route(self, method, route):
        try:
            if route == "/oauth2/authorize":
                return self.oauth_authorize(method)
            if route == "/oauth2/token":
                return self.oauth_token(method)
            if route in RPC_ROUTES:
                return self.rpc(method, route)
            if route in UPLOAD_ROUTES:
                return self.upload_route(method, route)
            if route in DOWNLOAD_ROUTES:
                return self.download_route(method, route)
            if route.startswith("/2/"):
                raise BadRequest('Unknown API function: "%s"' % route[3:])
            return text_response(404, "Not Found")
        except BadRequest as e:
            return text_response(400, str(e))
        except AuthFailure as e:
            return json_response(401, {"error_summary": e.tag + "/...",
                                       "error": {".tag": e.tag}})
        except RouteError as e:
            return json_response(e.status, {"error_summary": error_summary(e.error),
                                            "error": e.error})

    def authenticate(self, fn):
        auth = self.headers.get("Authorization")
        if auth is None and "authorization" in self.query:
            auth = self.query["authorization"][0]
        if auth is None:
            raise BadRequest('Error in call to API function "%s": Must provide HTTP header '
                             '"Authorization" or URL parameter "authorization".' % fn)
        m = re.fullmatch(r"Bearer ([^\s]+)", auth.strip())
        if not m:
            raise BadRequest('Error in call to API function "%s": Invalid authorization value in '
                             'HTTP header "Authorization": "%s". Expecting "Bearer '
                             '<oauth2-access-token>".' % (fn, auth))
        self.emu.check_access_token(m.group(1))
        self.token = m.group(1)

    def content_type(self):
        return (self.headers.get("Content-Type") or "").strip().lower()

    def rpc(self, method, route):
        fn = route[3:]
        if method != "POST":
            raise BadRequest('Error in call to API function "%s": Expecting a POST request' % fn)
        self.authenticate(fn)
        ct = self.content_type()
        raw = self.body.read_all(MAX_RPC_BODY)
        if route in VOID_ARG_ROUTES and ct == "" and raw.strip() == b"":
            arg = None
        else:
            if ct not in RPC_CONTENT_TYPES:
                raise BadRequest('Error in call to API function "%s": Bad HTTP "Content-Type" '
                                 'header: "%s".  Expecting one of "application/json", '
                                 '"application/json; charset=utf-8", '
                                 '"text/plain; charset=dropbox-cors-hack".' % (fn, ct))
            try:
                arg = json.loads(raw.decode("utf-8")) if raw.strip() else None
            except (ValueError, UnicodeDecodeError):
                raise BadRequest('Error in call to API function "%s": request body: could not '
                                 'decode input as JSON' % fn) from None
        self.log_entry["arg"] = arg
        if route in VOID_ARG_ROUTES:
            if arg is not None:
                raise BadRequest('Error in call to API function "%s": request body: expected '
                                 'null, got %s' % (fn, json_type(arg)))
            return getattr(self, "route_" + RPC_ROUTES[route])(None)
        if arg is None:
            raise BadRequest('Error in call to API function "%s": request body: could not '
                             'decode input as JSON' % fn)
        return getattr(self, "route_" + RPC_ROUTES[route])(Args(fn, "request body", arg))

    def api_arg(self, fn):
        raw = self.headers.get("Dropbox-API-Arg")
        where = 'HTTP header "Dropbox-API-Arg"'
        if raw is None and "arg" in self.query:
            raw = self.query["arg"][0]
            where = 'URL parameter "arg"'
        elif raw is not None and any(ord(c) > 0x7E for c in raw):
            raise BadRequest('Error in call to API function "%s": %s: must be HTTP-header-safe '
                             'JSON: escape 0x7F and non-ASCII characters as \\uXXXX' % (fn, where))
        if raw is None:
            raise BadRequest('Error in call to API function "%s": Must provide HTTP header '
                             '"Dropbox-API-Arg" or URL parameter "arg".' % fn)
        try:
            arg = json.loads(raw)
        except ValueError:
            raise BadRequest('Error in call to API function "%s": %s: could not decode input '
                             'as JSON' % (fn, where)) from None
        self.log_entry["arg"] = arg
        return Args(fn, where, arg)

    def upload_route(self, method, route):
        fn = route[3:]
        if method != "POST":
            raise BadRequest('Error in call to API function "%s": Expecting a POST request' % fn)
        self.authenticate(fn)
        ct = self.content_type()
        if ct not in UPLOAD_CONTENT_TYPES:
            raise BadRequest('Error in call to API function "%s": Bad HTTP "Content-Type" header: '
                             '"%s".  Expecting one of "application/octet-stream", '
                             '"text/plain; charset=dropbox-cors-hack".' % (fn, ct))
        arg = self.api_arg(fn)
        return getattr(self, "route_" + UPLOAD_ROUTES[route])(arg)

    def download_route(self, method, route):
        fn = route[3:]
        if method not in ("POST", "GET"):
            raise BadRequest('Error in call to API function "%s": Expecting a POST or GET '
                             'request' % fn)
        self.authenticate(fn)
        ct = self.content_type()
        if ct not in DOWNLOAD_CONTENT_TYPES:
            raise BadRequest('Error in call to API function "%s": Bad HTTP "Content-Type" header: '
                             '"%s".  Expecting one of "text/plain", "text/plain; charset=utf-8", '
                             '"application/octet-stream", "application/octet-stream; '
                             'charset=utf-8", "text/plain; charset=dropbox-cors-hack".' % (fn, ct))
        if self.body.length:
            raise BadRequest('Error in call to API function "%s": This function requires its '
                             'argument in the HTTP header "Dropbox-API-Arg", not in the request '
                             'body.' % fn)
        arg = self.api_arg(fn)
        return getattr(self, "route_" + DOWNLOAD_ROUTES[route])(arg)

    # -- files: RPC ------------------------------------------------------

    def lookup_existing(self, raw, wrap):
        """Resolve raw to an existing node's path_lower, else RouteError(wrap(LookupError))."""
        emu = self.emu
        try:
            pl, _ = emu.resolve(raw)
        except _Lookup as e:
            raise RouteError(wrap(lookup_error(e.kind))) from None
        if pl != "" and pl not in emu.nodes:
            raise RouteError(wrap(lookup_error("not_found")))
        return pl

    def route_get_metadata(self, a):
        p = a.path("path", PAT_READ, allow_root=True, allow_rev=True)
        include_deleted = a.get("include_deleted", "bool", False)
        emu = self.emu
        with emu.lock:
            if p == "":
                raise BadRequest('Error in call to API function "files/get_metadata": request '
                                 'body: path: The root folder is unsupported.')
            try:
                pl, _ = emu.resolve(p)
            except _Lookup as e:
                raise RouteError(tag("path", path=lookup_error(e.kind))) from None
            if pl in emu.nodes:
                return json_response(200, emu.metadata(pl))
            if include_deleted and pl in emu.tombstones:
                return json_response(200, emu.deleted_metadata(pl))
            raise RouteError(tag("path", path=lookup_error("not_found")))

    def route_create_folder(self, a):
        p = a.path("path", PAT_WRITE, allow_id=False)
        autorename = a.get("autorename", "bool", False)
        emu = self.emu
        with emu.lock:
            pl, display = emu.split_path(p)
            if not pl:
                raise RouteError(tag("path", path=write_error("malformed_path")))
            pl, display = emu.resolve(p)
            if emu.ancestor_conflict(pl):
                raise RouteError(tag("path", path=write_error("conflict", "file_ancestor")))
            existing = emu.nodes.get(pl)
            if existing is not None:
                if not autorename:
                    raise RouteError(tag("path", path=write_error("conflict", existing["kind"])))
                pl, display = emu.autorename(pl, display, folder=True)
            emu.make_folders(pl, display)
            return json_response(200, {"metadata": emu.metadata(pl, with_tag=False)})

    def route_delete(self, a):
        p = a.path("path", PAT_WRITE_OR_ID)
        parent_rev = a.get("parent_rev", "str")
        emu = self.emu
        with emu.lock:
            pl = self.lookup_existing(p, lambda le: tag("path_lookup", path_lookup=le))
            if pl == "":
                raise RouteError(tag("path_write", path_write=write_error("malformed_path")))
            n = emu.nodes[pl]
            if parent_rev is not None and (n["kind"] != "file" or n["rev"] != parent_rev):
                raise RouteError(tag("path_write", path_write=write_error("conflict", "file")))
            return json_response(200, {"metadata": emu.delete(pl)})

    def route_list_folder(self, a):
        p = a.path("path", PAT_LIST, allow_root=True)
        recursive = a.get("recursive", "bool", False)
        include_deleted = a.get("include_deleted", "bool", False)
        limit = a.get("limit", "int")
        if limit is not None and not 1 <= limit <= 2000:
            a.bad("limit: %d is not within range [1, 2000]" % limit)
        for flag in ("include_media_info", "include_has_explicit_shared_members",
                     "include_mounted_folders", "include_non_downloadable_files"):
            a.get(flag, "bool")
        emu = self.emu
        with emu.lock:
            wrap = lambda le: tag("path", path=le)  # noqa: E731
            pl = "" if p == "" else self.lookup_existing(p, wrap)
            if pl != "" and emu.nodes[pl]["kind"] != "folder":
                raise RouteError(wrap(lookup_error("not_folder")))
            paths = emu.children(pl, recursive)
            if recursive and pl != "":
                paths.insert(0, pl)
            pending = [emu.metadata(x) for x in paths]
            if include_deleted:
                prefix = pl + "/"
                for tpl in sorted(emu.tombstones):
                    if tpl.startswith(prefix) and tpl not in emu.nodes and (
                            recursive or "/" not in tpl[len(prefix):]):
                        pending.append(emu.deleted_metadata(tpl))
            state = {"path": pl, "recursive": recursive, "include_deleted": include_deleted,
                     "limit": limit, "seq": emu.seq, "pending": pending}
            return json_response(200, self.page(state))

    def page(self, state):
        """Next page of a listing; stores the rest under a new cursor."""
        emu = self.emu
        size = emu.page_size
        if state["limit"] is not None:
            size = min(size, state["limit"])
        entries = state["pending"][:size]
        rest = dict(state)
        rest["pending"] = state["pending"][size:]
        cursor = "AA%s%s" % (emu.epoch, secrets.token_urlsafe(48))
        emu.cursors[cursor] = rest
        while len(emu.cursors) > MAX_CURSORS:
            emu.cursors.pop(next(iter(emu.cursors)))
        return {"entries": entries, "cursor": cursor, "has_more": bool(rest["pending"])}

    def route_list_folder_continue(self, a):
        cursor = a.get("cursor", "str", required=True)
        if cursor == "":
            a.bad("cursor: '' must be at least 1 characters")
        emu = self.emu
        with emu.lock:
            state = emu.cursors.get(cursor)
            if state is None:
                if cursor.startswith("AA") and len(cursor) > 8 and cursor[2:8] != emu.epoch:
                    raise RouteError(tag("reset"))
                raise BadRequest('Error in call to API function "files/list_folder/continue": '
                                 'Invalid "cursor" parameter: %r' % cursor)
            if not state["pending"]:
                # Listing done: what changed under the folder since the cursor was made.
                pl = state["path"]
                if pl != "" and (pl not in emu.nodes or emu.nodes[pl]["kind"] != "folder"):
                    raise RouteError(tag("path", path=lookup_error("not_found")))
                prefix = pl + "/"

                def under(x):
                    return x.startswith(prefix) and (state["recursive"]
                                                     or "/" not in x[len(prefix):])
                changed = []
                for x in sorted(set(emu.nodes) | set(emu.tombstones)):
                    if not under(x):
                        continue
                    n = emu.nodes.get(x)
                    if n is not None:
                        if n["seq"] > state["seq"]:
                            changed.append(emu.metadata(x))
                    elif emu.tombstones[x]["seq"] > state["seq"]:
                        changed.append(emu.deleted_metadata(x))
                state = dict(state, pending=changed, seq=emu.seq)
            return json_response(200, self.page(state))

    # -- users / check / auth -------------------------------------------

    def route_get_current_account(self, _):
        emu = self.emu
        return json_response(200, {
            "account_id": emu.account_id,
            "name": {"given_name": "Emu", "surname": "Lator", "familiar_name": "Emu",
                     "display_name": "Emu Lator", "abbreviated_name": "EL"},
            "email": "emulator@example.invalid",
            "email_verified": True,
            "disabled": False,
            "country": "US",
            "locale": "en",
            "referral_link": "https://www.dropbox.com/referrals/emulator",
            "is_paired": False,
            "account_type": {".tag": "basic"},
            "root_info": {".tag": "user", "root_namespace_id": "3235641",
                          "home_namespace_id": "3235641"},
        })

    def route_get_space_usage(self, _):
        emu = self.emu
        allocated = emu.quota if emu.quota is not None else 2 * 1024 ** 4
        return json_response(200, {"used": emu.used_bytes(),
                                   "allocation": {".tag": "individual", "allocated": allocated}})

    def route_check_user(self, a):
        return json_response(200, {"result": a.get("query", "str", "")})

    def route_token_revoke(self, _):
        with self.emu.lock:
            self.emu.access_tokens.pop(self.token, None)
        return json_response(200, None)

    # -- files: upload ----------------------------------------------------

    def receive(self, dest, mode="wb", offset=None):
        """Stream the request body into dest. Returns (size, content_hash) of what
        was received, or None if it was over --max-request-bytes (rest drained)."""
        limit = self.emu.max_request
        if self.body.length is not None and self.body.length > limit:
            return None
        h = ContentHasher()
        size = 0
        with open(dest, mode) as f:
            if offset is not None:
                f.seek(offset)
            while True:
                data = self.body.read()
                if not data:
                    break
                size += len(data)
                if size > limit:
                    f.truncate(offset or 0)
                    return None
                f.write(data)
                h.update(data)
            if offset is not None:
                f.truncate(offset + size)
        return size, h.hexdigest()

    def commit_args(self, a):
        path = a.path("path", PAT_WRITE_OR_ID)
        mode = a.union("mode", ("add", "overwrite"), ("update",), default=("add", None))
        if mode[0] == "update" and (not isinstance(mode[1], str)
                                    or not re.fullmatch(r"[0-9a-f]{9,}", mode[1])):
            a.bad("mode: update: '%s' is not a valid rev" % (mode[1],))
        return {
            "target": path,
            "mode": mode,
            "autorename": a.get("autorename", "bool", False),
            "client_modified": a.timestamp("client_modified"),
            "strict_conflict": a.get("strict_conflict", "bool", False),
            "mute": a.get("mute", "bool", False),
        }

    def new_session(self, file, offset, closed):
        sid = "pid_upload_session:" + secrets.token_urlsafe(36)
        with self.emu.lock:
            self.emu.sessions[sid] = {"file": file, "offset": offset, "closed": closed,
                                      "lock": threading.Lock(), "created": time.time()}
        return sid

    def route_upload(self, a):
        commit = self.commit_args(a)
        want_hash = a.content_hash()
        emu = self.emu
        tmp = emu.tmp_path()
        try:
            got = self.receive(tmp)
            if got is None:
                raise RouteError(tag("payload_too_large"))
            size, chash = got
            if want_hash is not None and want_hash != chash:
                raise RouteError(tag("content_hash_mismatch"))
            if self.log_entry.get("fault") == "corrupt_commit":
                chash = corrupt_first_byte(tmp)
            try:
                md = emu.commit_file(commit["target"], commit["mode"], commit["autorename"],
                                     commit["client_modified"], commit["strict_conflict"],
                                     tmp, size, chash)
            except _Write as e:
                # Keep the data as a session so the client may finish elsewhere.
                sfile = os.path.join(emu.session_dir, secrets.token_hex(12))
                os.replace(tmp, sfile)
                sid = self.new_session(sfile, size, True)
                raise RouteError(tag("path", reason=e.error, upload_session_id=sid)) from None
            return json_response(200, md)
        finally:
            if os.path.exists(tmp):
                os.unlink(tmp)

    def route_session_start(self, a):
        close = a.get("close", "bool", False)
        st = a.union("session_type", ("sequential", "concurrent"), default=("sequential", None))
        if st[0] == "concurrent":
            a.bad("session_type: concurrent upload sessions are not supported by the emulator")
        want_hash = a.content_hash()
        emu = self.emu
        sfile = os.path.join(emu.session_dir, secrets.token_hex(12))
        try:
            got = self.receive(sfile)
        except ClientGone:
            os.unlink(sfile)
            raise
        if got is None:
            os.unlink(sfile)
            raise RouteError(tag("payload_too_large"))
        size, chash = got
        if want_hash is not None and want_hash != chash:
            os.unlink(sfile)
            raise RouteError(tag("content_hash_mismatch"))
        sid = self.new_session(sfile, size, close)
        return json_response(200, {"session_id": sid})

    def session_for(self, cursor_args, wrap):
        sid = cursor_args.get("session_id", "str", required=True)
        offset = cursor_args.get("offset", "int", required=True)
        if offset < 0:
            cursor_args.bad("offset: %d is not within range [0, 18446744073709551615]" % offset)
        with self.emu.lock:
            s = self.emu.sessions.get(sid)
        if s is None:
            raise RouteError(wrap(tag("not_found")))
        return sid, s, offset

    def append_to_session(self, s, offset, want_hash, wrap, mismatch):
        """Check the offset, then stream the body to the session at offset.
        Caller holds s['lock']."""
        if s["offset"] != offset:
            self.log_entry["correct_offset"] = s["offset"]  # in the request log, for tests
            raise RouteError(wrap(tag("incorrect_offset", correct_offset=s["offset"])))
        try:
            got = self.receive(s["file"], "r+b", offset)
        except ClientGone:
            with open(s["file"], "r+b") as f:
                f.truncate(s["offset"])
            raise
        if got is None:
            raise RouteError(wrap(tag("payload_too_large")))
        size, chash = got
        if want_hash is not None and want_hash != chash:
            with open(s["file"], "r+b") as f:
                f.truncate(s["offset"])
            raise RouteError(mismatch)
        if s["offset"] + size > MAX_FILE_SIZE:
            with open(s["file"], "r+b") as f:
                f.truncate(s["offset"])
            raise RouteError(wrap(tag("too_large")))
        s["offset"] += size
        return size

    def route_session_append(self, a):
        cur = a.sub("cursor")
        close = a.get("close", "bool", False)
        want_hash = a.content_hash()
        ident = lambda e: e  # noqa: E731  UploadSessionAppendError is flat
        sid, s, offset = self.session_for(cur, ident)
        with s["lock"]:
            if s["closed"]:
                raise RouteError(tag("closed"))
            self.append_to_session(s, offset, want_hash, ident, tag("content_hash_mismatch"))
            if close:
                s["closed"] = True
        return json_response(200, None)

    def route_session_finish(self, a):
        cur = a.sub("cursor")
        commit = self.commit_args(a.sub("commit"))
        want_hash = a.content_hash()
        wrap = lambda e: tag("lookup_failed", lookup_failed=e)  # noqa: E731
        sid, s, offset = self.session_for(cur, wrap)
        emu = self.emu
        with s["lock"]:
            if s["closed"] and (self.body.length or 0) > 0:
                raise RouteError(wrap(tag("closed")))
            self.append_to_session(s, offset, want_hash, wrap, tag("content_hash_mismatch"))
            with emu.lock:
                if emu.sessions.get(sid) is not s:
                    raise RouteError(wrap(tag("not_found")))
            size = s["offset"]
            chash = content_hash_of_file(s["file"])
            tmp = emu.tmp_path()
            os.link(s["file"], tmp)
            if self.log_entry.get("fault") == "corrupt_commit":
                # Copy first: the session file, linked to tmp, must keep the bytes sent.
                os.unlink(tmp)
                shutil.copyfile(s["file"], tmp)
                chash = corrupt_first_byte(tmp)
            try:
                md = emu.commit_file(commit["target"], commit["mode"], commit["autorename"],
                                     commit["client_modified"], commit["strict_conflict"],
                                     tmp, size, chash)
            except _Write as e:
                os.unlink(tmp)
                raise RouteError(tag("path", path=e.error)) from None
            with emu.lock:
                emu.sessions.pop(sid, None)
            os.unlink(s["file"])
            return json_response(200, md)

    # -- files: download ----------------------------------------------------

    def route_download(self, a):
        p = a.path("path", PAT_READ, allow_rev=True)
        rev = a.get("rev", "str")
        emu = self.emu
        wrap = lambda le: tag("path", path=le)  # noqa: E731
        with emu.lock:
            if p == "":
                raise RouteError(wrap(lookup_error("not_file")))
            pl = self.lookup_existing(p, wrap)
            n = emu.nodes[pl]
            if n["kind"] != "file":
                raise RouteError(wrap(lookup_error("not_file")))
            if rev is not None and rev != n["rev"]:
                raise RouteError(wrap(lookup_error("not_found")))
            md = emu.metadata(pl, with_tag=False)
            f = open(n["blob"], "rb")
        size = md["size"]
        headers = [("Dropbox-API-Result", header_safe_json(md)), ("Accept-Ranges", "bytes")]
        # "ignore_range": a server that answers every download with the whole file.
        rng = self.parse_range(None if getattr(self, "fault", None) == "ignore_range" else self.headers.get("Range"), size)
        if rng == "unsatisfiable":
            f.close()
            return text_response(416, "Requested Range Not Satisfiable",
                                 [("Content-Range", "bytes */%d" % size)])
        if rng is None:
            return Response(200, content_type="application/octet-stream", headers=headers,
                            file=f, file_start=0, file_len=size)
        start, end = rng
        headers.append(("Content-Range", "bytes %d-%d/%d" % (start, end, size)))
        return Response(206, content_type="application/octet-stream", headers=headers, file=f,
                        file_start=start, file_len=end - start + 1)

    @staticmethod
    def parse_range(value, size):
        """(start, end) inclusive, None for 'whole file', or 'unsatisfiable'."""
        if not value:
            return None
        m = re.fullmatch(r"\s*bytes\s*=\s*(\d*)\s*-\s*(\d*)\s*", value)
        if not m or (m.group(1) == "" and m.group(2) == ""):
            return None  # malformed or multi-range: ignored, as RFC 9110 allows
        if m.group(1) == "":
            n = int(m.group(2))
            if n == 0 or size == 0:
                return "unsatisfiable"
            return max(0, size - n), size - 1
        start = int(m.group(1))
        end = int(m.group(2)) if m.group(2) else size - 1
        if m.group(2) and end < start:
            return None
        if start >= size:
            return "unsatisfiable"
        return start, min(end, size - 1)

    # -- OAuth ----------------------------------------------------------------

    def oauth_authorize(self, method):
        if method != "GET":
            return text_response(405, "Method Not Allowed")
        q = {k: v[0] for k, v in self.query.items()}
        try:
            code = self.issue_code(q)
        except BadRequest as e:
            return text_response(400, str(e))
        redirect = q.get("redirect_uri")
        if redirect:
            sep = "&" if "?" in redirect else "?"
            params = {"code": code}
            if "state" in q:
                params["state"] = q["state"]
            return Response(302, headers=[("Location", redirect + sep
                                           + urllib.parse.urlencode(params))])
        return json_response(200, {"code": code})

    def issue_code(self, q):
        emu = self.emu
        if q.get("client_id") != emu.app_key:
            raise BadRequest("Invalid client_id: %r" % q.get("client_id"))
        if q.get("response_type", "code") != "code":
            raise BadRequest("Unsupported response_type: only \"code\" is emulated")
        challenge = q.get("code_challenge")
        method = q.get("code_challenge_method")
        if challenge is not None:
            method = method or "plain"
            if method not in ("S256", "plain"):
                raise BadRequest("Invalid code_challenge_method: %r" % method)
            if not re.fullmatch(r"[A-Za-z0-9._~-]{43,128}", challenge):
                raise BadRequest("Invalid code_challenge")
        access_type = q.get("token_access_type") or "online"
        if access_type not in ("online", "offline", "legacy"):
            raise BadRequest("Invalid token_access_type: %r" % access_type)
        return emu.new_code(q["client_id"], challenge, method, access_type,
                            q.get("redirect_uri"))

    def oauth_error(self, error, description, status=400):
        return json_response(status, {"error": error, "error_description": description})

    def oauth_token(self, method):
        if method != "POST":
            return text_response(405, "Method Not Allowed")
        raw = self.body.read_all(MAX_RPC_BODY)
        ct = self.content_type()
        params = {k: v[0] for k, v in self.query.items()}
        if raw:
            if not ct.startswith("application/x-www-form-urlencoded"):
                return self.oauth_error("invalid_request",
                                        "Content-Type must be application/x-www-form-urlencoded")
            for k, v in urllib.parse.parse_qs(raw.decode("utf-8", "replace"),
                                              keep_blank_values=True).items():
                params[k] = v[0]
        client_id = params.get("client_id")
        client_secret = params.get("client_secret")
        auth = self.headers.get("Authorization") or ""
        if auth.lower().startswith("basic "):
            try:
                client_id, _, client_secret = base64.b64decode(
                    auth[6:].strip()).decode("utf-8").partition(":")
            except (ValueError, UnicodeDecodeError):
                return self.oauth_error("invalid_client", "bad Basic authorization header")
        emu = self.emu
        if client_id is None:
            return self.oauth_error("invalid_request",
                                    "No auth function available for given request")
        if client_id != emu.app_key:
            return self.oauth_error("invalid_client", "Invalid client_id or client_secret")
        if client_secret is not None and client_secret != emu.app_secret:
            return self.oauth_error("invalid_client", "Invalid client_id or client_secret")
        grant = params.get("grant_type")
        if grant == "authorization_code":
            return self.grant_code(params, client_id, client_secret)
        if grant == "refresh_token":
            return self.grant_refresh(params, client_id, client_secret)
        if grant is None:
            return self.oauth_error("invalid_request", "missing required field \"grant_type\"")
        return self.oauth_error("unsupported_grant_type", "grant_type %r is not supported" % grant)

    def grant_code(self, params, client_id, client_secret):
        emu = self.emu
        code = params.get("code")
        with emu.lock:
            c = emu.codes.pop(code, None) if code else None
        if c is None or c["expires"] < time.time():
            return self.oauth_error("invalid_grant", "code doesn't exist or has expired")
        if c["redirect_uri"] and params.get("redirect_uri") != c["redirect_uri"]:
            return self.oauth_error("invalid_grant", "redirect_uri mismatch")
        if c["challenge"] is not None:
            verifier = params.get("code_verifier")
            if not verifier:
                return self.oauth_error("invalid_request", "missing code_verifier")
            if c["method"] == "S256":
                computed = base64.urlsafe_b64encode(
                    hashlib.sha256(verifier.encode("ascii", "replace")).digest()
                ).decode().rstrip("=")
            else:
                computed = verifier
            if computed != c["challenge"]:
                return self.oauth_error("invalid_grant", "invalid code verifier")
            pkce = True
        else:
            if client_secret is None:
                return self.oauth_error("invalid_client", "client_secret is required "
                                        "without PKCE")
            pkce = False
        access, refresh = emu.issue_tokens(client_id, pkce, c["access_type"])
        body = {"access_token": access, "token_type": "bearer", "scope": SCOPE,
                "uid": emu.uid, "account_id": emu.account_id}
        if c["access_type"] != "legacy":
            body["expires_in"] = int(emu.token_lifetime)
        if refresh:
            body["refresh_token"] = refresh
        return json_response(200, body)

    def grant_refresh(self, params, client_id, client_secret):
        emu = self.emu
        refresh = params.get("refresh_token")
        with emu.lock:
            r = emu.refresh_tokens.get(refresh) if refresh else None
        if r is None or r["revoked"]:
            return self.oauth_error("invalid_grant", "refresh token is invalid or revoked")
        if not r["pkce"] and client_secret is None:
            return self.oauth_error("invalid_client", "client_secret is required for this "
                                    "refresh token")
        with emu.lock:
            access = "sl." + secrets.token_urlsafe(96)
            emu.access_tokens[access] = {"expires": time.time() + emu.token_lifetime,
                                         "refresh": refresh}
        return json_response(200, {"access_token": access, "token_type": "bearer",
                                   "expires_in": int(emu.token_lifetime)})

    # -- control routes ---------------------------------------------------

    def run_control(self, method, route):
        try:
            raw = self.body.read_all(MAX_RPC_BODY)
            q = {k: v[0] for k, v in self.query.items()}
            body = {}
            if raw.strip():
                try:
                    body = json.loads(raw.decode("utf-8"))
                except (ValueError, UnicodeDecodeError):
                    raise BadRequest("control route: body must be JSON") from None
            if isinstance(body, dict):
                params = dict(q, **{k: v for k, v in body.items()})
            else:
                params = q
            resp = self.control(method, route, params, body)
        except BadRequest as e:
            resp = text_response(400, str(e))
        except ClientGone:
            self.abort()
            return
        self.send(resp)

    def control(self, method, route, params, body):
        emu = self.emu
        name = route[len("/_emulator/"):]
        if name == "health":
            return json_response(200, {"ok": True})
        if name == "info":
            return json_response(200, self.server.info)
        if name == "log":
            since = int(params.get("since", 0) or 0)
            with emu.lock:
                entries = [dict(e) for e in emu.log_entries if e["seq"] > since]
            return json_response(200, {"requests": entries})
        if name == "files":
            # ?sha256=1 adds each file's plain SHA-256, read from its stored blob: a
            # test compares what the server holds with the local file, byte for byte.
            want_sha = str(params.get("sha256", "")).lower() in ("1", "true", "yes")
            with emu.lock:
                out = [emu.metadata(pl) for pl in sorted(emu.nodes)]
                blobs = {pl: n["blob"] for pl, n in emu.nodes.items() if n["kind"] == "file"}
                sessions = {sid: {"offset": s["offset"], "closed": s["closed"]}
                            for sid, s in emu.sessions.items()}
            if want_sha:
                for md in out:
                    blob = blobs.get(md["path_lower"])
                    if blob is not None:
                        try:
                            md["sha256"] = sha256_of_file(blob)
                        except OSError:  # deleted since the listing: report it without
                            pass
            return json_response(200, {"entries": out, "used": emu.used_bytes(),
                                       "upload_sessions": sessions})
        if name == "faults" and method == "GET":
            return json_response(200, emu.faults.snapshot())
        if method != "POST":
            return text_response(405, "control routes other than health, info, log, files "
                                      "and faults (GET) are POST")
        if name == "faults":
            emu.faults.set(body if isinstance(body, dict) else {})
            return json_response(200, emu.faults.snapshot())
        if name == "reset":
            emu.reset()
            return json_response(200, {"reset": True})
        if name == "authorize":
            q = {k: str(v) for k, v in params.items()}
            q.setdefault("client_id", emu.app_key)
            return json_response(200, {"code": self.issue_code(q)})
        if name == "expire_tokens":
            return json_response(200, {"expired": emu.expire_access_tokens()})
        if name == "revoke_refresh_token":
            tok = params.get("refresh_token")
            if not tok:
                raise BadRequest("revoke_refresh_token: give refresh_token")
            keep = str(params.get("keep_access_tokens", "")).lower() in ("1", "true", "yes")
            return json_response(200, {"revoked": emu.revoke_refresh_token(tok, keep)})
        if name == "issue_token":
            access, refresh = emu.issue_tokens(emu.app_key, True,
                                               params.get("token_access_type", "offline"))
            return json_response(200, {"access_token": access, "refresh_token": refresh,
                                       "expires_in": int(emu.token_lifetime)})
        if name == "config":
            with emu.lock:
                if "page_size" in params:
                    v = int(params["page_size"])
                    if v < 1:
                        raise BadRequest("page_size must be >= 1")
                    emu.page_size = v
                if "quota" in params:
                    emu.quota = None if params["quota"] in (None, "", "none") \
                        else int(params["quota"])
                if "token_lifetime" in params:
                    emu.token_lifetime = float(params["token_lifetime"])
                if "max_request_bytes" in params:
                    emu.max_request = int(params["max_request_bytes"])
                return json_response(200, {"page_size": emu.page_size, "quota": emu.quota,
                                           "token_lifetime": emu.token_lifetime,
                                           "max_request_bytes": emu.max_request})
        return text_response(404, "unknown control route %s" % route)


def sha256_of_file(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(IO_CHUNK), b""):
            h.update(chunk)
    return h.hexdigest()


class Server(http.server.ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = 64

    def __init__(self, addr, emu, ssl_ctx, verbose):
        super().__init__(addr, Handler)
        self.emu = emu
        self.ssl_ctx = ssl_ctx
        self.verbose = verbose
        self.info = {}

    def finish_request(self, request, client_address):
        # TLS handshake in the connection's own thread, not the accept loop.
        request.settimeout(120)
        try:
            tls = self.ssl_ctx.wrap_socket(request, server_side=True)
        except (ssl.SSLError, OSError) as e:
            if self.verbose:
                log("TLS handshake with %s failed: %s" % (client_address, e))
            return
        try:
            self.RequestHandlerClass(tls, client_address, self)
        except (ConnectionError, ssl.SSLError, socket.timeout, OSError):
            pass
        finally:
            try:
                tls.close()
            except OSError:
                pass

    def abort_connection(self, conn):
        """End conn at once: no response, no TLS close_notify, just FIN."""
        try:
            conn.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass

    def handle_error(self, request, client_address):
        if self.verbose:
            super().handle_error(request, client_address)


# ---------------------------------------------------------------- TLS material


def ensure_certs(tls_dir):
    """A CA and a server certificate for 127.0.0.1/localhost, made with openssl once."""
    os.makedirs(tls_dir, exist_ok=True)
    ca_key = os.path.join(tls_dir, "ca.key")
    ca_pem = os.path.join(tls_dir, "ca.pem")
    key = os.path.join(tls_dir, "server.key")
    crt = os.path.join(tls_dir, "server.pem")
    if all(os.path.exists(p) for p in (ca_key, ca_pem, key, crt)):
        r = subprocess.run(["openssl", "x509", "-in", crt, "-noout", "-checkend", "86400"],
                           capture_output=True)
        if r.returncode == 0:
            return ca_pem, crt, key
    ext = os.path.join(tls_dir, "server.ext")
    csr = os.path.join(tls_dir, "server.csr")
    with open(ext, "w") as f:
        f.write("subjectAltName=IP:127.0.0.1,IP:::1,DNS:localhost\n"
                "basicConstraints=critical,CA:FALSE\n"
                "keyUsage=critical,digitalSignature,keyEncipherment\n"
                "extendedKeyUsage=serverAuth\n"
                "subjectKeyIdentifier=hash\n"
                "authorityKeyIdentifier=keyid,issuer\n")
    old = os.umask(0o077)
    try:
        cmds = [
            ["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt",
             "ec_paramgen_curve:prime256v1", "-nodes", "-keyout", ca_key, "-out", ca_pem,
             "-days", "3650", "-subj", "/CN=storebackup Dropbox emulator test CA",
             "-addext", "basicConstraints=critical,CA:TRUE",
             "-addext", "keyUsage=critical,keyCertSign,cRLSign"],
            ["openssl", "req", "-new", "-newkey", "ec", "-pkeyopt",
             "ec_paramgen_curve:prime256v1", "-nodes", "-keyout", key, "-out", csr,
             "-subj", "/CN=127.0.0.1"],
            ["openssl", "x509", "-req", "-in", csr, "-CA", ca_pem, "-CAkey", ca_key,
             "-set_serial", "0x" + secrets.token_hex(12), "-days", "825", "-out", crt,
             "-extfile", ext],
        ]
        for cmd in cmds:
            r = subprocess.run(cmd, capture_output=True, text=True)
            if r.returncode != 0:
                raise RuntimeError("openssl failed: %s\n%s" % (" ".join(cmd[:3]), r.stderr))
    finally:
        os.umask(old)
    os.chmod(ca_pem, 0o644)
    os.chmod(crt, 0o644)
    for p in (csr, ext):
        try:
            os.unlink(p)
        except FileNotFoundError:
            pass
    return ca_pem, crt, key


# ---------------------------------------------------------------- main


def write_private(path, text):
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(text)
    os.chmod(path, 0o600)


def build(args):
    state = os.path.abspath(args.state or tempfile.mkdtemp(prefix="dropbox-emulator-"))
    os.makedirs(state, exist_ok=True)
    ca_pem, crt, key = ensure_certs(os.path.join(state, "tls"))
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    ctx.load_cert_chain(crt, key)
    ctx.set_alpn_protocols(["http/1.1"])
    emu = Emulator(state,
                   app_key=args.app_key or rand_alnum(15, string.ascii_lowercase + string.digits),
                   app_secret=args.app_secret or rand_alnum(15, string.ascii_lowercase
                                                            + string.digits),
                   page_size=args.page_size, token_lifetime=args.token_lifetime,
                   quota=args.quota, max_request=args.max_request_bytes)
    server = Server(("127.0.0.1", args.port), emu, ctx, args.verbose)
    port = server.server_address[1]
    access, refresh = emu.issue_tokens(emu.app_key, True, "offline")
    base = "https://127.0.0.1:%d" % port
    server.info = {
        "port": port, "pid": os.getpid(), "ca_file": ca_pem, "api_url": base,
        "content_url": base, "web_url": base, "app_key": emu.app_key,
        "app_secret": emu.app_secret, "refresh_token": refresh, "access_token": access,
        "account_id": emu.account_id, "state_dir": state, "page_size": emu.page_size,
        "token_lifetime": emu.token_lifetime,
    }
    write_private(os.path.join(state, "emulator.json"), json.dumps(server.info) + "\n")
    return server


def serve(server, pidfile):
    stop = threading.Event()

    def on_signal(signum, frame):
        if not stop.is_set():
            stop.set()
            threading.Thread(target=server.shutdown, daemon=True).start()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    try:
        server.serve_forever(poll_interval=0.2)
    finally:
        server.server_close()
        if pidfile:
            try:
                with open(pidfile) as f:
                    if f.read().strip() == str(os.getpid()):
                        os.unlink(pidfile)
            except OSError:
                pass


def main(argv=None):
    ap = argparse.ArgumentParser(description="Dropbox HTTP API v2 emulator (loopback, HTTPS)")
    ap.add_argument("--port", type=int, default=0, help="port on 127.0.0.1; 0 picks a free one")
    ap.add_argument("--state", help="state folder (TLS material, file contents); a new temp "
                                    "folder if not given")
    ap.add_argument("--page-size", type=int, default=3,
                    help="most entries per list_folder page (default 3)")
    ap.add_argument("--token-lifetime", type=float, default=14400,
                    help="seconds an access token lives (default 14400, as Dropbox)")
    ap.add_argument("--quota", type=int, default=None,
                    help="bytes the account may hold; over it writes fail insufficient_space")
    ap.add_argument("--max-request-bytes", type=int, default=DEFAULT_MAX_REQUEST,
                    help="largest upload request body (default 150 MiB)")
    ap.add_argument("--app-key", help="the app key (client_id); random if not given")
    ap.add_argument("--app-secret", help="the app secret; random if not given")
    ap.add_argument("--daemon", action="store_true", help="detach once listening")
    ap.add_argument("--pidfile", help="write the serving process's pid here")
    ap.add_argument("--verbose", action="store_true", help="log every request to stderr")
    args = ap.parse_args(argv)
    if args.page_size < 1:
        ap.error("--page-size must be >= 1")

    if not args.daemon:
        server = build(args)
        if args.pidfile:
            write_private(args.pidfile, "%d\n" % os.getpid())
        print(json.dumps(server.info), flush=True)
        serve(server, args.pidfile)
        return 0

    if not args.state:
        ap.error("--daemon needs --state")
    rfd, wfd = os.pipe()
    pid = os.fork()
    if pid > 0:
        os.close(wfd)
        data = b""
        with os.fdopen(rfd, "rb") as r:
            data = r.readline()
        if not data.strip():
            print("dropbox-emulator: the daemon did not start; see %s"
                  % os.path.join(os.path.abspath(args.state), "emulator.log"), file=sys.stderr)
            return 1
        sys.stdout.write(data.decode())
        sys.stdout.flush()
        return 0
    # child
    os.close(rfd)
    os.setsid()
    os.makedirs(args.state, exist_ok=True)
    logf = os.open(os.path.join(args.state, "emulator.log"),
                   os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    os.dup2(logf, 1)
    os.dup2(logf, 2)
    try:
        server = build(args)
        server.info["pid"] = os.getpid()
        write_private(os.path.join(server.emu.state_dir, "emulator.json"),
                      json.dumps(server.info) + "\n")
        if args.pidfile:
            write_private(args.pidfile, "%d\n" % os.getpid())
        os.write(wfd, (json.dumps(server.info) + "\n").encode())
        os.close(wfd)
        log("serving on %s" % server.info["api_url"])
        serve(server, args.pidfile)
    except BaseException as e:  # noqa: BLE001 - report anything to the log, then exit
        log("fatal: %r" % (e,))
        os._exit(1)
    os._exit(0)


if __name__ == "__main__":
    sys.exit(main())
