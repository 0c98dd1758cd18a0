#!/usr/bin/env python3
"""An independent listing of a stores directory, for the golden-archive tests.

It walks the tree with os.lstat (not storebackup's manifest, scanner or verify) and prints
JSON: for every path (the root as "."), its type, permission bits in octal, mtime in whole
seconds, and for files their size and SHA-256, for links their target. Databases (files
starting with the SQLite header) also get a dump of their rows: per table its row count
and the SHA-256 of its rows in rowid order (rows as JSON, blobs as hex), so a database
compares by what it holds as well as by its bytes. SQLite's -wal, -shm and -journal files
of a database are left out: a backup stores each database as one consistent file without them.

    python3 tree_listing.py STORES_DIR > listing.json
    python3 tree_listing.py --compare LISTING_JSON STORES_DIR   (exit 1, naming each difference)
    python3 tree_listing.py --compare LISTING_JSON STORES_DIR ARCHIVE
        (a chain's listing, format 3: the tree of ARCHIVE, one backup of its `chain`)
"""
import hashlib
import json
import os
import sqlite3
import stat
import sys

SQLITE_HEADER = b"SQLite format 3\x00"


def file_sha256(path):
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for chunk in iter(lambda: handle.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def is_database(path):
    with open(path, "rb") as handle:
        return handle.read(16) == SQLITE_HEADER


def cell(value):
    if isinstance(value, bytes):
        return {"blob": value.hex()}
    return value


def rows_dump(path):
    """Per table: rows and the SHA-256 of their JSON lines, read-only and without a -wal."""
    connection = sqlite3.connect("file:%s?mode=ro&immutable=1" % path, uri=True)
    try:
        tables = [row[0] for row in connection.execute(
            "SELECT name FROM sqlite_master WHERE type='table' AND name NOT LIKE 'sqlite_%' ORDER BY name")]
        dump = {}
        for table in tables:
            digest = hashlib.sha256()
            count = 0
            for row in connection.execute('SELECT * FROM "%s" ORDER BY rowid' % table.replace('"', '""')):
                digest.update((json.dumps([cell(value) for value in row]) + "\n").encode())
                count += 1
            dump[table] = {"rows": count, "sha256": digest.hexdigest()}
        dump["integrity_check"] = connection.execute("PRAGMA integrity_check").fetchone()[0]
        return dump
    finally:
        connection.close()


def text(name):
    """A name or link target as JSON text: UTF-8 as it is, any other byte as \\xNN (names are
    bytes on Linux; format 2 keeps names that are not UTF-8)."""
    return os.fsencode(name).decode("utf-8", "backslashreplace")


def describe(root, relative):
    path = os.path.join(root, relative) if relative != "." else root
    info = os.lstat(path)
    entry = {"mode": "%04o" % stat.S_IMODE(info.st_mode), "mtime": int(info.st_mtime)}
    if stat.S_ISDIR(info.st_mode):
        entry["type"] = "directory"
    elif stat.S_ISLNK(info.st_mode):
        entry["type"] = "symlink"
        entry["target"] = text(os.readlink(path))
        # A link's own permission bits mean nothing on Linux (always 0777).
        del entry["mode"]
    elif stat.S_ISREG(info.st_mode):
        entry["type"] = "file"
        entry["size"] = info.st_size
        entry["sha256"] = file_sha256(path)
        if info.st_size >= 100 and is_database(path):
            entry["type"] = "database"
            entry["rows"] = rows_dump(path)
    elif stat.S_ISFIFO(info.st_mode):
        entry["type"] = "fifo"
    else:
        entry["type"] = "special"
    return entry


def is_wal_database(path):
    """Bytes 18 and 19 of the header are 2 in WAL mode (1 for a rollback journal)."""
    with open(path, "rb") as handle:
        header = handle.read(20)
    return len(header) == 20 and header[18] == 2 and header[19] == 2


def listing(root):
    """The tree as a dict by relative path. A folder that directly holds a WAL database is
    marked "walFolder": SQLite makes and removes the database's -wal and -shm files in it
    whenever a connection opens and closes, which changes the folder's time (storebackup
    0.1.0's create and its restore's reload both open the databases), so its mtime is not a
    fact of the backup; compare() leaves it out."""
    result = {".": describe(root, ".")}
    for folder, directories, files in os.walk(root):
        for name in directories + files:
            relative = os.path.relpath(os.path.join(folder, name), root)
            # A database's companions are not part of a backup: its snapshot is consistent alone.
            companion = next((suffix for suffix in COMPANIONS if name.endswith(suffix)), None)
            if companion and os.path.isfile(os.path.join(folder, name[:-len(companion)])):
                continue
            result[relative] = describe(root, relative)
    for relative, entry in list(result.items()):
        if entry["type"] == "database" and is_wal_database(os.path.join(root, relative)):
            result[os.path.dirname(relative) or "."]["walFolder"] = True
    return {text(relative): entry for relative, entry in result.items()}


COMPANIONS = ("-wal", "-shm", "-journal")


def comparable(tree):
    """The listing without what is not a fact of the backup (see listing())."""
    result = {}
    for path, entry in tree.items():
        entry = dict(entry)
        if entry.get("walFolder"):
            entry.pop("mtime", None)
        result[path] = entry
    return result


def differences(expected, got):
    """One line per path whose comparable listing differs."""
    expected, got = comparable(expected), comparable(got)
    return ["%s: expected %s, found %s" % (path, expected.get(path), got.get(path))
            for path in sorted(set(expected) | set(got)) if expected.get(path) != got.get(path)]


if __name__ == "__main__":
    if len(sys.argv) in (4, 5) and sys.argv[1] == "--compare":
        # tree_listing.py --compare LISTING_JSON STORES_DIR [ARCHIVE]: exit 1 and name each difference.
        with open(sys.argv[2]) as handle:
            listed = json.load(handle)
        if len(sys.argv) == 5:
            chain = [link for link in listed.get("chain", []) if link["archive"] == sys.argv[4]]
            if len(chain) != 1:
                sys.exit("%s is not a backup of the chain in %s" % (sys.argv[4], sys.argv[2]))
            wanted = chain[0]["tree"]
        else:
            wanted = listed["tree"]
        lines = differences(wanted, listing(sys.argv[3]))
        print("\n".join(lines))
        sys.exit(1 if lines else 0)
    print(json.dumps(listing(sys.argv[1]), indent=1, sort_keys=True))
