#!/usr/bin/env python3
"""Writes a chain of format-3 backups (a full, then incrementals) per docs/FORMAT.md, with
Python's zipfile and sqlite3 only: a second writer, independent of storebackup's, so that
restore is checked against the format and not against its own create.

    make_incremental.py OUT [--nights N] [--seed S] [--mutate CASE] [--encrypt PASSWORD]

OUT/backups/ gets one archive a night; OUT/stores/night-K/ keeps a copy of the store as it
was when backup K was made (what restoring backup K must give back). A night's work on the
store (seeded): rows of a database updated, inserted and deleted, blobs added, changed and
removed, a database whose page size changes, a database added then removed, folders and a
link changed, a mode and a time changed without the content.

--encrypt encrypts every entry but the folders with WinZip AES-256 through libzip (Python's
zipfile cannot write AES), as an encrypted storebackup archive is.

--mutate writes the last incremental as a hostile or broken one instead:
  delta-beyond-pages   a page delta record numbered past the page count
  delta-unsorted       page delta records in descending order
  delta-page-size      a page delta whose header's page size is not the database's
  delta-larger         a page delta holding bytes after its last record
  base-missing-file    a file marked "source": "base" that its base does not hold
  foreign-base         base.manifestSHA256 names another manifest
  manifest-page-size   the manifest gives a patched database another page size than the base's
  final-sha            a patched database's final SHA-256 in the manifest is not what the delta makes
  self-base            the incremental names itself as its base (a chain that loops)
  delta-missing        a database marked "source": "pages" without its page delta
  delta-stray          a page delta for a database the manifest does not patch
  base-file-under-link the folder docs/ replaced by a link while its files stay "source": "base"
"""
import argparse
import datetime
import hashlib
import json
import os
import random
import shutil
import sqlite3
import stat
import struct
import sys
import zipfile

SQLITE_MAGIC = b"SQLite format 3\x00"
ROWS = 600  # rows of App.sqlite on the first night (--rows)
START = datetime.datetime(2026, 11, 20, 2, 0, 0, tzinfo=datetime.timezone.utc)


def compact(date):
    return date.strftime("%Y-%m-%d %H%M%S")


def iso(date):
    return date.strftime("%Y-%m-%dT%H:%M:%SZ")


# ---------------------------------------------------------------- the store and its nights


def write(path, data, mtime):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "wb") as handle:
        handle.write(data)
    os.utime(path, (mtime, mtime))


def database(path, page_size=None):
    connection = sqlite3.connect(path, isolation_level=None)
    connection.execute("PRAGMA journal_mode=DELETE")
    if page_size:
        connection.execute(f"PRAGMA page_size={page_size}")
    return connection


def night_zero(store, rng, mtime):
    os.makedirs(store)
    app = database(store + "/App.sqlite", 4096)
    app.execute("CREATE TABLE items(id INTEGER PRIMARY KEY, name TEXT, payload BLOB)")
    app.execute("BEGIN")
    for number in range(ROWS):
        app.execute("INSERT INTO items(name, payload) VALUES (?, ?)", (f"item {number}", rng.randbytes(300)))
    app.execute("COMMIT")
    app.close()
    other = database(store + "/Other.sqlite", 4096)
    other.execute("CREATE TABLE notes(id INTEGER PRIMARY KEY, text TEXT)")
    for number in range(50):
        other.execute("INSERT INTO notes(text) VALUES (?)", (f"note {number} " * 20,))
    other.close()
    for number in range(6):
        write(f"{store}/.App_SUPPORT/_EXTERNAL_DATA/blob-{number}", rng.randbytes(rng.randint(1000, 40000)), mtime)
    write(store + "/docs/readme.txt", b"read me\n", mtime)
    write(store + "/old/x.txt", b"old\n", mtime)
    write(store + "/ro/f.txt", b"in a read-only folder\n", mtime)
    os.chmod(store + "/ro", 0o555)
    os.symlink("docs/readme.txt", store + "/current")


def change_rows(path, rng, updates, inserts, deletes):
    connection = database(path)
    connection.execute("BEGIN")
    ids = [row[0] for row in connection.execute("SELECT id FROM items")]
    for identifier in rng.sample(ids, min(updates, len(ids))):
        connection.execute("UPDATE items SET payload = ?, name = name || '+' WHERE id = ?", (rng.randbytes(300), identifier))
    for number in range(inserts):
        connection.execute("INSERT INTO items(name, payload) VALUES (?, ?)", (f"new {number}", rng.randbytes(300)))
    for identifier in rng.sample(ids, min(deletes, len(ids))):
        connection.execute("DELETE FROM items WHERE id = ?", (identifier,))
    connection.execute("COMMIT")
    connection.close()


def night(store, number, rng, mtime):
    blobs = store + "/.App_SUPPORT/_EXTERNAL_DATA"
    change_rows(store + "/App.sqlite", rng, updates=40, inserts=60, deletes=15)
    if number == 1:
        write(blobs + "/blob-1", rng.randbytes(5000), mtime)
        write(blobs + "/blob-6", rng.randbytes(7000), mtime)
        os.unlink(blobs + "/blob-2")
        write(store + "/docs/other.txt", b"another\n", mtime)
        os.unlink(store + "/current")
        os.symlink("docs/other.txt", store + "/current")
        shutil.rmtree(store + "/old")
        write(store + "/new/y.txt", b"new\n", mtime)
    elif number == 2:
        other = database(store + "/Other.sqlite")
        other.execute("PRAGMA page_size=8192")
        other.execute("VACUUM")
        other.close()
        added = database(store + "/Added.sqlite", 1024)
        added.execute("CREATE TABLE t(x)")
        added.execute("INSERT INTO t VALUES ('added on night 2')")
        added.close()
        os.chmod(store + "/ro", 0o755)
        write(store + "/ro/f.txt", b"changed in a read-only folder\n", mtime)
        os.chmod(store + "/ro", 0o555)
        os.chmod(store + "/docs/readme.txt", 0o640)
    elif number == 3:
        connection = database(store + "/App.sqlite")
        connection.execute("DELETE FROM items WHERE id % 3 = 0")
        connection.execute("VACUUM")
        connection.close()
        if os.path.exists(store + "/Added.sqlite"):
            os.unlink(store + "/Added.sqlite")
        os.unlink(store + "/current")
        write(store + "/current/z.txt", b"a folder where a link was\n", mtime)
        os.utime(blobs + "/blob-3", (mtime, mtime))
        write(blobs + f"/blob-n{number}", rng.randbytes(3000), mtime)
    else:
        random_night(store, number, rng, mtime)
    for name in ("App.sqlite", "Other.sqlite", "Added.sqlite", "Extra.sqlite"):
        if os.path.exists(store + "/" + name):
            os.utime(store + "/" + name, (mtime, mtime))


def random_night(store, number, rng, mtime):
    """Nights after the fourth: a seeded mix of the same kinds of change."""
    blobs = store + "/.App_SUPPORT/_EXTERNAL_DATA"
    names = sorted(os.listdir(blobs))
    for _ in range(rng.randint(0, 3)):
        write(f"{blobs}/blob-r{number}-{rng.randint(0, 999)}", rng.randbytes(rng.randint(0, 20000)), mtime)
    for name in rng.sample(names, min(len(names), rng.randint(0, 2))):
        choice = rng.choice(["change", "remove", "chmod", "touch"])
        path = blobs + "/" + name
        if choice == "change":
            write(path, rng.randbytes(rng.randint(0, 20000)), mtime)
        elif choice == "remove":
            os.unlink(path)
        elif choice == "chmod":
            os.chmod(path, rng.choice([0o600, 0o640, 0o644]))
        else:
            os.utime(path, (mtime, mtime))
    if rng.random() < 0.3:
        connection = database(store + "/App.sqlite")
        connection.execute("VACUUM")
        connection.close()
    if rng.random() < 0.3:
        other = database(store + "/Other.sqlite")
        size = other.execute("PRAGMA page_size").fetchone()[0]
        other.execute(f"PRAGMA page_size={4096 if size != 4096 else 8192}")
        other.execute("VACUUM")
        other.execute("INSERT INTO notes(text) VALUES (?)", (f"night {number}",))
        other.close()
    extra = store + "/Extra.sqlite"
    if os.path.exists(extra) and rng.random() < 0.5:
        os.unlink(extra)
    elif rng.random() < 0.5:
        connection = database(extra, 2048)
        connection.execute("CREATE TABLE IF NOT EXISTS t(x)")
        connection.execute("INSERT INTO t VALUES (?)", (rng.randbytes(rng.randint(10, 5000)),))
        connection.close()
    folder = f"{store}/folder-{rng.randint(0, 2)}"
    if os.path.isdir(folder):
        shutil.rmtree(folder)
    else:
        write(folder + "/inside.txt", rng.randbytes(100), mtime)
    link = store + "/link"
    if os.path.lexists(link):
        os.unlink(link)
    os.symlink(rng.choice(["App.sqlite", "docs/readme.txt", "missing-target", "new"]), link)


# ---------------------------------------------------------------- the archive


def walk(store):
    """Every path under the store (escaped form = plain ASCII here), sorted."""
    items = []
    for folder, folders, files in os.walk(store):
        for name in folders + files:
            path = os.path.join(folder, name)
            items.append(os.path.relpath(path, store))
    return sorted(items)


def page_size_of(data):
    value = struct.unpack(">H", data[16:18])[0]
    return 65536 if value == 1 else value


def page_hashes(data, page_size):
    return [hashlib.sha256(data[offset:offset + page_size]).digest()[:16] for offset in range(0, len(data), page_size)]


def page_map(page_size, pages, records, complete):
    out = b"SBPM" + bytes([1, 0 if complete else 1, 1, 0]) + struct.pack("<II", page_size, pages)
    for number, digest in records:
        out += digest if complete else struct.pack("<I", number) + digest
    return out


def page_delta(page_size, pages, records):
    out = b"SBPD" + bytes([1, 0, 0, 0]) + struct.pack("<III", page_size, pages, len(records))
    for number, content in records:
        out += struct.pack("<I", number) + content
    return out


def zip_info(name, mode, mtime):
    info = zipfile.ZipInfo(name, date_time=(2026, 11, 20, 2, 0, 0))
    info.create_system = 3
    info.external_attr = (mode & 0xFFFF) << 16 | (0x10 if stat.S_ISDIR(mode) else 0)
    info.extra = struct.pack("<HHBi", 0x5455, 5, 1, mtime)
    info.compress_type = zipfile.ZIP_STORED if stat.S_ISDIR(mode) else zipfile.ZIP_DEFLATED
    return info


def describe(store):
    """The store as a manifest's files (without sources) and its databases, with contents."""
    files, databases, contents = [], [], {}
    for path in walk(store):
        full = store + "/" + path
        info = os.lstat(full)
        entry = {"path": path, "mode": stat.S_IMODE(info.st_mode), "mtime": int(info.st_mtime)}
        if stat.S_ISDIR(info.st_mode):
            entry.update(type="directory", size=0)
        elif stat.S_ISLNK(info.st_mode):
            target = os.readlink(full)
            entry.update(type="symlink", size=len(target.encode()), linkTarget=target)
        else:
            with open(full, "rb") as handle:
                data = handle.read()
            contents[path] = data
            is_database = data[:16] == SQLITE_MAGIC
            entry.update(type="database" if is_database else "file", size=len(data), sha256=hashlib.sha256(data).hexdigest())
            if is_database:
                size = page_size_of(data)
                databases.append({"path": path, "pageSize": size, "pageCount": len(data) // size,
                                  "journalMode": "delete", "snapshotMethod": "python"})
        files.append(entry)
    return files, databases, contents


def write_archive(archive, store, created, base=None, mutate=None):
    """Writes the store as a full (base None) or as an incremental on `base` (its
    manifest, manifest bytes, contents and name). Returns what the next night needs."""
    files, databases, contents = describe(store)
    page_sizes = {database["path"]: database["pageSize"] for database in databases}
    entries, deltas, maps = [], {}, {}
    for entry in files:
        path = entry["path"]
        if entry["type"] not in ("file", "database"):
            continue
        data = contents[path]
        old = base["files"].get(path) if base else None
        if old and old["type"] == entry["type"] and old["sha256"] == entry["sha256"]:
            entry["source"] = "base"
        elif (old and entry["type"] == "database" and old["type"] == "database"
              and base["pageSizes"].get(path) == page_sizes[path]):
            entry["source"] = "pages"
            size = page_sizes[path]
            before = base["contents"][path]
            records = [(offset // size + 1, data[offset:offset + size]) for offset in range(0, len(data), size)
                       if data[offset:offset + size] != before[offset:offset + size]]
            deltas[path] = (size, len(data) // size, records)
        if entry["type"] == "database":
            size = page_sizes[path]
            hashes = page_hashes(data, size)
            if base is None:
                maps[path] = page_map(size, len(hashes), list(enumerate(hashes, 1)), complete=True)
            else:
                old_hashes = page_hashes(base["contents"].get(path, b""), size) if old else []
                changed = [(n, h) for n, h in enumerate(hashes, 1) if n > len(old_hashes) or old_hashes[n - 1] != h]
                maps[path] = page_map(size, len(hashes), changed, complete=False)

    manifest = {
        "format": 3, "tool": "make_incremental.py", "toolVersion": "1", "hostName": "fixture",
        "sourcePath": "/fixture/Stores", "createdAt": iso(created), "compressionLevel": 6,
        "rootMode": 0o755, "rootMtime": int(created.timestamp()),
        "files": files, "databases": databases,
        "kind": "incremental" if base else "full",
        "chainLength": base["manifest"]["chainLength"] + 1 if base else 0,
        "pageMaps": [{"path": path, "hash": "sha256-128", "complete": base is None} for path in sorted(maps)],
    }
    if base:
        manifest["base"] = {"name": base["name"], "manifestSHA256": hashlib.sha256(base["manifestBytes"]).hexdigest(),
                            "createdAt": base["manifest"]["createdAt"]}
    mutate_manifest(manifest, deltas, mutate)
    if mutate == "self-base":
        manifest["base"]["name"] = os.path.basename(archive)
    if mutate == "base-file-under-link":
        for entry in files:
            if entry["path"] == "docs":
                entry.update(type="symlink", size=3, linkTarget="new")
    with zipfile.ZipFile(archive, "w") as out:
        for entry in files:
            path, kind = entry["path"], entry["type"]
            if "source" in entry:
                continue
            mode = os.lstat(store + "/" + path).st_mode
            if kind == "symlink" and not stat.S_ISLNK(mode):
                mode = 0o120777
            if kind == "directory":
                out.writestr(zip_info(path + "/", mode, entry["mtime"]), b"")
            elif kind == "symlink":
                out.writestr(zip_info(path, mode, entry["mtime"]), entry["linkTarget"].encode())
            else:
                out.writestr(zip_info(path, mode, entry["mtime"]), contents[path])
        if mutate == "delta-stray":
            out.writestr(zip_info(".storebackup/pages/Other.sqlite", 0o100600, 0), page_delta(4096, 1, []))
        for path, (size, pages, records) in sorted(deltas.items()):
            if mutate == "delta-missing":
                continue
            out.writestr(zip_info(".storebackup/pages/" + path, 0o100600, 0), mutate_delta(size, pages, records, mutate))
        for path, data in sorted(maps.items()):
            out.writestr(zip_info(".storebackup/pagemap/" + path, 0o100600, 0), data)
        out.writestr(zip_info(".storebackup/format-3", 0o100644, 0), b"storebackup archive format 3: see docs/FORMAT.md\n")
        manifest_bytes = json.dumps(manifest, indent=2, sort_keys=True).encode()
        out.writestr(zip_info(".storebackup/manifest.json", 0o100644, 0), manifest_bytes)
    return {
        "name": os.path.basename(archive), "manifest": manifest, "manifestBytes": manifest_bytes,
        "files": {entry["path"]: entry for entry in files}, "contents": contents, "pageSizes": page_sizes,
    }


def mutate_manifest(manifest, deltas, mutate):
    if mutate == "base-missing-file":
        manifest["files"].append({"path": "docs/never-there.txt", "type": "file", "size": 3, "mode": 0o644,
                                  "mtime": 0, "sha256": hashlib.sha256(b"no\n").hexdigest(), "source": "base"})
        manifest["files"].sort(key=lambda entry: entry["path"])
    elif mutate == "foreign-base":
        manifest["base"]["manifestSHA256"] = hashlib.sha256(b"another backup's manifest").hexdigest()
    elif mutate == "final-sha":
        for entry in manifest["files"]:
            if entry.get("source") == "pages":
                entry["sha256"] = hashlib.sha256(b"something else").hexdigest()
    elif mutate == "manifest-page-size":
        for database in manifest["databases"]:
            if database["path"] in deltas:
                database["pageSize"] *= 2


def mutate_delta(size, pages, records, mutate):
    if mutate == "delta-beyond-pages" and records:
        records = records[:-1] + [(pages + 1, records[-1][1])]
    elif mutate == "delta-unsorted" and len(records) > 1:
        records = list(reversed(records))
    data = page_delta(size, pages, records)
    if mutate == "delta-page-size":
        data = data[:8] + struct.pack("<I", size * 2) + data[12:]
    elif mutate == "delta-larger":
        data += b"\x00" * (4 + size)
    return data


def encrypt(path, password):
    """Every entry with content AES-256 encrypted, through libzip itself."""
    import ctypes
    libzip = ctypes.CDLL("libzip.so.4")
    libzip.zip_open.restype = ctypes.c_void_p
    libzip.zip_get_name.restype = ctypes.c_char_p
    error = ctypes.c_int(0)
    archive = libzip.zip_open(path.encode(), 0, ctypes.byref(error))
    assert archive, error.value
    for index in range(libzip.zip_get_num_entries(ctypes.c_void_p(archive), 0)):
        name = libzip.zip_get_name(ctypes.c_void_p(archive), ctypes.c_uint64(index), 0)
        if name.endswith(b"/"):
            continue
        assert libzip.zip_file_set_encryption(ctypes.c_void_p(archive), ctypes.c_uint64(index), ctypes.c_uint16(259),
                                              password.encode()) == 0
    assert libzip.zip_close(ctypes.c_void_p(archive)) == 0


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out")
    parser.add_argument("--nights", type=int, default=4, help="backups in the chain (the first is the full)")
    parser.add_argument("--seed", type=int, default=35)
    parser.add_argument("--mutate", default=None)
    parser.add_argument("--encrypt", default=None, help="password for WinZip AES-256")
    parser.add_argument("--rows", type=int, default=600, help="rows of App.sqlite on the first night (a larger store)")
    parser.add_argument("--full-last", action="store_true",
                        help="also write the last night as a full backup (compare restore times)")
    arguments = parser.parse_args()
    global ROWS
    ROWS = arguments.rows
    rng = random.Random(arguments.seed)
    store = arguments.out + "/work/Stores"
    os.makedirs(arguments.out + "/backups")
    os.makedirs(arguments.out + "/stores")
    base = None
    names = []
    for number in range(arguments.nights):
        created = START + datetime.timedelta(days=number)
        mtime = int(created.timestamp()) - 600
        if number == 0:
            night_zero(store, rng, mtime)
            name = compact(created) + " Stores.zip"
        else:
            night(store, number, rng, mtime)
            name = f"{compact(created)} incremental on {compact(created - datetime.timedelta(days=1))} Stores.zip"
        last = number == arguments.nights - 1
        base = write_archive(arguments.out + "/backups/" + name, store, created, base,
                             arguments.mutate if last and number > 0 else None)
        if arguments.encrypt:
            encrypt(arguments.out + "/backups/" + name, arguments.encrypt)
        if last and arguments.full_last:
            os.makedirs(arguments.out + "/full-last")
            write_archive(arguments.out + "/full-last/" + compact(created) + " Stores.zip", store, created)
        shutil.copytree(store, f"{arguments.out}/stores/night-{number}", symlinks=True)
        names.append(name)
    json.dump({"backups": names}, open(arguments.out + "/chain.json", "w"), indent=2)


if __name__ == "__main__":
    sys.exit(main())
