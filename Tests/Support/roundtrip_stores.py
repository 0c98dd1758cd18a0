#!/usr/bin/env python3
"""Stores that hold everything legal on Linux, and an independent description of a tree.

    roundtrip_stores.py generate ROOT SEED     a random store (seeded); prints what it made as JSON
    roundtrip_stores.py make KIND ROOT         one of the stores of issue 32's findings
    roundtrip_stores.py describe ROOT          the tree as JSON: the test's oracle

The description walks the tree with lstat on raw byte names (never storebackup's own code or
manifest): for each path (hex of its bytes) the type, the permission bits (07777), the
modification time in whole seconds, and the content: SHA-256 of a file, the target of a link,
and for a SQLite database its rows (every table, in rowid order). The companions of a
database (-wal, -shm, -journal), sockets and device files are not described: storebackup
leaves them out by design (a database's snapshot holds its WAL; sockets and devices cannot
be backed up, and create warns about each).
"""
import hashlib
import json
import os
import random
import socket
import sqlite3
import stat
import sys

SQLITE_MAGIC = b"SQLite format 3\x00"


def set_time(path, seconds):
    os.utime(path, ns=(seconds * 10**9, seconds * 10**9), follow_symlinks=False)


def make_database(path, mode, rows, seed):
    db = sqlite3.connect(path)
    db.execute("PRAGMA journal_mode=%s" % mode)
    db.execute("CREATE TABLE items(id INTEGER PRIMARY KEY, name TEXT, value BLOB)")
    rng = random.Random(seed)
    db.executemany("INSERT INTO items(name, value) VALUES (?, ?)",
                   [("item %d" % i, rng.randbytes(rng.randint(0, 64))) for i in range(rows)])
    db.commit()
    db.close()


def make_socket(path):
    # Bound by its name from its folder: a socket's address holds at most 107 bytes.
    here = os.getcwd()
    os.chdir(os.path.dirname(path) or b".")
    try:
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.bind(os.path.basename(path))
        s.close()
    finally:
        os.chdir(here)


# Names of every class issue 32 lists (component bytes).
NAME_CLASSES = [
    lambda r, i: b"file%d.txt" % i,
    lambda r, i: b"\xe9t\xe9%d" % i,                          # Latin-1, not UTF-8
    lambda r, i: b"line%d\nbreak" % i,                        # newline
    lambda r, i: b"tab%d\there" % i,                          # tab
    lambda r, i: b"esc%d\x1b[31m" % i,                         # ESC
    lambda r, i: b"del%d\x7f" % i,                             # DEL
    lambda r, i: b"c1%d\xc2\x85" % i,                          # C1 control (NEL) as UTF-8
    lambda r, i: b"dir%d\\file.txt" % i,                       # backslash
    lambda r, i: b"50%%%d.txt" % i,                            # percent
    lambda r, i: b"%%41%d" % i,                                # looks like an escape
    lambda r, i: b"caf\xc3\xa9%d" % i,                         # NFC
    lambda r, i: b"cafe\xcc\x81%d" % i,                        # NFD (same word, another file)
    lambda r, i: b"\xf0\x9f\x8e\x92 %d" % i,                   # emoji and space
    lambda r, i: b"-dash %d" % i,
    lambda r, i: (b"L%d" % i) + b"x" * r.randint(100, 250),    # long name part
]


def random_name(rng, counter):
    return NAME_CLASSES[rng.randrange(len(NAME_CLASSES))](rng, counter)


FILE_MODES = [0o644, 0o600, 0o755, 0o4755, 0o2755, 0o6755, 0o444, 0o1644, 0o640]
DIR_MODES = [0o755, 0o700, 0o1777, 0o2775, 0o3755, 0o750]
TIMES = [0, -1, -86400 * 365 * 30, -2_000_000_000, 1_000_000_000, 2_147_483_647, 2_147_483_648,
         4_102_444_800, 5_000_000_000, 1_700_000_000]


def random_time(rng):
    return rng.choice(TIMES) if rng.random() < 0.6 else rng.randint(-2_500_000_000, 6_000_000_000)


def generate(root, seed):
    """A random store: returns {"outsideLinks": [...], "sockets": [...]} (names as hex)."""
    rng = random.Random(seed)
    root = os.fsencode(root)
    os.makedirs(root)
    dirs = [b""]
    files, links, made = [], [], {"outsideLinks": [], "sockets": [], "fifos": 0}
    counter = 0

    def child(parent):
        nonlocal counter
        counter += 1
        return (parent + b"/" if parent else b"") + random_name(rng, counter)

    # Folders, some of them deep, and (sometimes) the store's own .storebackup.
    for _ in range(rng.randint(1, 6)):
        parent = rng.choice(dirs)
        if parent.count(b"/") >= 4:
            continue
        path = child(parent)
        os.mkdir(os.path.join(root, path))
        dirs.append(path)
    if rng.random() < 0.3:
        os.makedirs(os.path.join(root, b".storebackup/cache"))
        dirs += [b".storebackup", b".storebackup/cache"]
    # Databases: WAL and rollback, at shallow depth (their absolute paths go to SQLite).
    databases = []
    for index, mode in enumerate(["wal", "delete"][: rng.randint(1, 2)]):
        parent = rng.choice([d for d in dirs if d.count(b"/") <= 1])
        path = (parent + b"/" if parent else b"") + (b"db%d-\xc3\xa9.sqlite" % index if rng.random() < 0.5 else b"Data%d.sqlite" % index)
        make_database(os.path.join(root, path), mode, rng.randint(1, 200), rng.random())
        databases.append(path)
    # Files, empty ones too, and a hard link now and then.
    for _ in range(rng.randint(2, 14)):
        path = child(rng.choice(dirs))
        size = rng.choice([0, 0, 1, 100, 5000, rng.randint(0, 200_000)])
        with open(os.path.join(root, path), "wb") as f:
            f.write(rng.randbytes(size) if rng.random() < 0.5 else (b"text %d " % size) * (size // 8))
        files.append(path)
    if files and rng.random() < 0.3:
        target = child(rng.choice(dirs))
        os.link(os.path.join(root, rng.choice(files)), os.path.join(root, target))
    # FIFOs and sockets.
    if rng.random() < 0.4:
        path = child(rng.choice(dirs))
        os.mkfifo(os.path.join(root, path))
        made["fifos"] += 1
        files.append(path)
    if rng.random() < 0.2:
        path = child(b"")[:80]
        make_socket(os.path.join(root, path))
        made["sockets"].append(path.hex())
    # Links: inside (to files, folders, dangling), and outside.
    for _ in range(rng.randint(0, 5)):
        parent = rng.choice(dirs)
        path = child(parent)
        kind = rng.random()
        if kind < 0.5 and (files or databases):
            target = os.path.relpath(rng.choice(files + databases), parent or b".")
        elif kind < 0.65:
            target = os.path.relpath(rng.choice(dirs) or b".", parent or b".")
        elif kind < 0.75:
            target = b"missing-" + random_name(rng, 0)
        elif kind < 0.88:
            target = b"/srv/shared/config.json"
            made["outsideLinks"].append(path.hex())
        else:
            target = b"../" * (parent.count(b"/") + (1 if parent else 0) + 1) + b"SharedAssets"
            made["outsideLinks"].append(path.hex())
        os.symlink(target, os.path.join(root, path))
        links.append(path)
    # Modes and times last, deepest first, so that nothing written afterwards changes them.
    for path in files:
        full = os.path.join(root, path)
        os.chmod(full, rng.choice(FILE_MODES))
        set_time(full, random_time(rng))
    for path in links:
        set_time(os.path.join(root, path), random_time(rng))
    for path in sorted(dirs, key=len, reverse=True):
        full = os.path.join(root, path) if path else root
        os.chmod(full, rng.choice(DIR_MODES) if path else 0o755)
        set_time(full, random_time(rng))
    return made


def make(kind, root):
    root = os.fsencode(root)
    os.makedirs(root)
    make_database(os.path.join(root, b"App.sqlite"), "wal", 20, 1)
    made = {"outsideLinks": [], "sockets": []}
    if kind == "outside-links":
        os.symlink(b"/srv/shared/config.json", os.path.join(root, b"shared-config"))
        os.symlink(b"../SharedAssets", os.path.join(root, b"assets"))
        made["outsideLinks"] = [b"assets".hex(), b"shared-config".hex()]
    elif kind == "link-loop":
        # ping -> pong -> ping never resolves; self -> self neither. Legal on disk.
        os.symlink(b"pong", os.path.join(root, b"ping"))
        os.symlink(b"ping", os.path.join(root, b"pong"))
        os.symlink(b"self", os.path.join(root, b"self"))
        made["outsideLinks"] = [b"ping".hex(), b"pong".hex(), b"self".hex()]
    elif kind == "backslash":
        open(os.path.join(root, b"dir\\file.txt"), "wb").write(b"backslash\n")
    elif kind == "long-path":
        # Parts of 250 bytes down to a relative path of about 3,900 bytes.
        path = b""
        while len(path) < 3600:
            path += (b"/" if path else b"") + b"d" * 250
        os.makedirs(os.path.join(root, path))
        open(os.path.join(root, path, b"f" * 250), "wb").write(b"deep\n")
    elif kind == "many-links":
        open(os.path.join(root, b"target.txt"), "wb").write(b"t\n")
        os.mkdir(os.path.join(root, b"links"))
        for i in range(1500):
            os.symlink(b"../target.txt" if i % 2 else b"../links/%d" % (i - 1) if i else b"../target.txt",
                       os.path.join(root, b"links", b"%d" % i))
    elif kind == "nfc-nfd":
        open(os.path.join(root, b"caf\xc3\xa9"), "wb").write(b"composed\n")
        open(os.path.join(root, b"cafe\xcc\x81"), "wb").write(b"decomposed\n")
    elif kind == "control-characters":
        for name in [b"bell\x07", b"new\nline", b"tab\there", b"esc\x1b[31mred", b"del\x7f"]:
            open(os.path.join(root, name), "wb").write(name)
    elif kind == "not-utf8":
        open(os.path.join(root, b"\xe9t\xe9"), "wb").write(b"latin-1\n")
        os.mkdir(os.path.join(root, b"bad\xff\xfe"))
        open(os.path.join(root, b"bad\xff\xfe/inner"), "wb").write(b"inner\n")
    elif kind == "modes":
        os.mkdir(os.path.join(root, b"shared-tmp"))
        os.chmod(os.path.join(root, b"shared-tmp"), 0o1777)
        os.mkdir(os.path.join(root, b"group"))
        os.chmod(os.path.join(root, b"group"), 0o2775)
        for name, mode in [(b"setuid", 0o4755), (b"setgid", 0o2755), (b"both", 0o6750), (b"sticky-file", 0o1644)]:
            open(os.path.join(root, name), "wb").write(name)
            os.chmod(os.path.join(root, name), mode)
    elif kind == "times":
        for name, seconds in [(b"before-1970", -86400 * 365 * 10), (b"long-ago", -2_000_000_000), (b"in-2100", 4_102_444_800),
                              (b"after-2038", 2_147_483_648), (b"epoch", 0)]:
            open(os.path.join(root, name), "wb").write(name)
            set_time(os.path.join(root, name), seconds)
        os.mkdir(os.path.join(root, b"old-folder"))
        set_time(os.path.join(root, b"old-folder"), -1_000_000)
    elif kind == "empty-things":
        open(os.path.join(root, b"empty"), "wb").close()
        os.makedirs(os.path.join(root, b"empty-folder/deeper-empty"))
    elif kind == "hardlinks":
        open(os.path.join(root, b"first"), "wb").write(b"same inode\n")
        os.link(os.path.join(root, b"first"), os.path.join(root, b"second"))
    elif kind == "fifo":
        os.mkfifo(os.path.join(root, b"pipe"), 0o620)
        set_time(os.path.join(root, b"pipe"), 1_000_000_000)
    elif kind == "socket":
        make_socket(os.path.join(root, b"app.sock"))
        made["sockets"] = [b"app.sock".hex()]
        made["devices"] = []
        # Only root may make device files. As root a refusal is a failure, not a store
        # without its device; otherwise the device case is named as not applicable, so
        # that a run without it says so instead of passing as if it had been tried.
        if os.geteuid() == 0:
            os.mknod(os.path.join(root, b"null-device"), 0o600 | stat.S_IFCHR, os.makedev(1, 3))
            made["devices"].append(b"null-device".hex())
        else:
            made["devices_not_applicable"] = "not root (euid %d): only root may make a device file" % os.geteuid()
            print("roundtrip_stores.py: the device file case is not applicable: "
                  + made["devices_not_applicable"], file=sys.stderr)
    elif kind == "own-storebackup-folder":
        os.makedirs(os.path.join(root, b".storebackup/cache"))
        open(os.path.join(root, b".storebackup/manifest.json"), "wb").write(b"{\"mine\": true}\n")
        open(os.path.join(root, b".storebackup/cache/entry"), "wb").write(b"cached\n")
        os.makedirs(os.path.join(root, b"sub/.storebackup"))
    else:
        raise SystemExit("unknown kind " + kind)
    return made


def is_database(path, info):
    if not stat.S_ISREG(info.st_mode) or info.st_size < 512:
        return False
    with open(path, "rb") as f:
        return f.read(16) == SQLITE_MAGIC


def database_rows(path):
    # immutable=1: read without creating -wal/-shm files (that would change the folder).
    uri = "file:" + "".join(chr(b) if (b < 128 and chr(b).isalnum()) or chr(b) in "/._-" else "%%%02X" % b for b in path) + "?immutable=1"
    db = sqlite3.connect(uri, uri=True)
    tables = [row[0] for row in db.execute("SELECT name FROM sqlite_master WHERE type='table' ORDER BY name")]
    rows = {t: [[v.hex() if isinstance(v, bytes) else v for v in row] for row in db.execute('SELECT * FROM "%s" ORDER BY rowid' % t)]
            for t in tables}
    db.close()
    return rows


def describe(root):
    root = os.fsencode(root)
    result = {}
    info = os.lstat(root)
    result[""] = {"type": "directory", "mode": info.st_mode & 0o7777, "mtime": info.st_mtime_ns // 10**9}
    pending = [b""]
    while pending:
        relative = pending.pop()
        folder = os.path.join(root, relative) if relative else root
        names = set(os.listdir(folder))
        for name in sorted(names):
            path = relative + b"/" + name if relative else name
            full = os.path.join(root, path)
            info = os.lstat(full)
            entry = {"mode": info.st_mode & 0o7777, "mtime": info.st_mtime_ns // 10**9}
            if stat.S_ISSOCK(info.st_mode) or stat.S_ISCHR(info.st_mode) or stat.S_ISBLK(info.st_mode):
                continue
            if any(name.endswith(s) and name[: -len(s)] in names and is_database(os.path.join(folder, name[: -len(s)]), os.lstat(os.path.join(folder, name[: -len(s)])))
                   for s in (b"-wal", b"-shm", b"-journal")):
                continue
            if stat.S_ISDIR(info.st_mode):
                entry["type"] = "directory"
                pending.append(path)
            elif stat.S_ISLNK(info.st_mode):
                entry["type"] = "symlink"
                entry["target"] = os.readlink(full).hex()
                entry["mode"] = 0o777
            elif stat.S_ISFIFO(info.st_mode):
                entry["type"] = "fifo"
            elif is_database(full, info):
                entry["type"] = "database"
                entry["rows"] = database_rows(full)
            elif stat.S_ISREG(info.st_mode):
                entry["type"] = "file"
                digest = hashlib.sha256()
                with open(full, "rb") as f:
                    for block in iter(lambda: f.read(1 << 20), b""):
                        digest.update(block)
                entry["sha256"] = digest.hexdigest()
            else:
                entry["type"] = "other"
            result[path.hex()] = entry
    return result


if __name__ == "__main__":
    command = sys.argv[1]
    if command == "generate":
        print(json.dumps(generate(sys.argv[2], int(sys.argv[3]))))
    elif command == "make":
        print(json.dumps(make(sys.argv[2], sys.argv[3])))
    elif command == "describe":
        print(json.dumps(describe(sys.argv[2]), sort_keys=True))
    else:
        raise SystemExit("unknown command " + command)
