#!/usr/bin/env python3
"""Seeded nights of work on a store, for the incremental round-trip test.

    incremental_nights.py make STORE SEED       a store: two databases (WAL and rollback
                                                journal), blobs, folders, links
    incremental_nights.py night STORE SEED N    night N's random work on it (N >= 1)

Each night draws from: rows updated, inserted and deleted in both databases; VACUUM;
a page-size change (VACUUM with a new page_size); a database added or removed; blobs
added, rewritten (same size and a new size) and removed; a blob rewritten with its old
size and time put back (only its ctime and content change); folders added and removed;
links added, re-pointed and removed; modes changed. Standard library only.
"""
import os
import random
import sqlite3
import sys


def database(path, journal="wal", page_size=4096):
    db = sqlite3.connect(path, isolation_level=None)
    db.execute(f"PRAGMA page_size={page_size}")
    db.execute(f"PRAGMA journal_mode={journal}")
    db.execute("CREATE TABLE IF NOT EXISTS items(id INTEGER PRIMARY KEY, title TEXT, body BLOB, amount INTEGER)")
    return db


def insert(db, rng, count):
    db.execute("BEGIN")
    db.executemany("INSERT INTO items(title, body, amount) VALUES (?, ?, ?)",
                   ((f"item {rng.random()}", rng.randbytes(rng.randint(10, 900)), rng.randint(0, 1000))
                    for _ in range(count)))
    db.execute("COMMIT")


def blob_folder(store):
    return os.path.join(store, ".App_SUPPORT", "_EXTERNAL_DATA")


def blob_name(rng):
    return "".join(rng.choice("0123456789ABCDEF") for _ in range(32))


def make(store, seed):
    rng = random.Random(seed)
    os.makedirs(blob_folder(store))
    os.makedirs(os.path.join(store, "Caches", "Empty"))
    db = database(os.path.join(store, "App.sqlite"))
    insert(db, rng, 3000)
    db.close()
    settings = database(os.path.join(store, "Settings.sqlite"), journal="delete", page_size=1024)
    insert(settings, rng, 200)
    settings.close()
    for _ in range(12):
        with open(os.path.join(blob_folder(store), blob_name(rng)), "wb") as f:
            f.write(rng.randbytes(rng.randint(0, 40_000)))
    with open(os.path.join(store, "notes.txt"), "w") as f:
        f.write("first notes\n")
    os.symlink("notes.txt", os.path.join(store, "notes-link"))


def databases(store):
    return sorted(n for n in os.listdir(store) if n.endswith(".sqlite"))


def rewrite_keeping_size_and_time(path, rng):
    info = os.stat(path)
    with open(path, "r+b") as f:
        f.write(rng.randbytes(info.st_size))
    os.utime(path, ns=(info.st_atime_ns, info.st_mtime_ns))


def night(store, seed, number):
    rng = random.Random(seed * 1000 + number)
    for name in databases(store):
        db = sqlite3.connect(os.path.join(store, name), isolation_level=None)
        (count,) = db.execute("SELECT count(*) FROM items").fetchone()
        db.execute("BEGIN")
        for _ in range(rng.randint(0, max(1, count // 20))):
            db.execute("UPDATE items SET amount = amount + 1, title = title || '+' WHERE id = ?",
                       (rng.randint(1, max(1, count)),))
        if rng.random() < 0.5:
            db.execute("DELETE FROM items WHERE id % ? = 0", (rng.randint(7, 40),))
        db.execute("COMMIT")
        insert(db, rng, rng.randint(0, 400))
        choice = rng.random()
        if choice < 0.15:
            db.execute("VACUUM")
        elif choice < 0.25:
            # A new page size takes effect with VACUUM, outside WAL mode.
            (mode,) = db.execute("PRAGMA journal_mode").fetchone()
            (size,) = db.execute("PRAGMA page_size").fetchone()
            db.execute("PRAGMA journal_mode=delete")
            db.execute(f"PRAGMA page_size={8192 if size != 8192 else 2048}")
            db.execute("VACUUM")
            db.execute(f"PRAGMA journal_mode={mode}")
        db.close()
    if rng.random() < 0.2:
        extra = os.path.join(store, f"Extra{number}.sqlite")
        db = database(extra, journal=rng.choice(["wal", "delete"]))
        insert(db, rng, rng.randint(1, 300))
        db.close()
    extras = [n for n in databases(store) if n.startswith("Extra")]
    if extras and rng.random() < 0.2:
        victim = os.path.join(store, rng.choice(extras))
        for suffix in ("", "-wal", "-shm", "-journal"):
            if os.path.exists(victim + suffix):
                os.remove(victim + suffix)

    folder = blob_folder(store)
    blobs = sorted(os.listdir(folder))
    for _ in range(rng.randint(0, 6)):
        with open(os.path.join(folder, blob_name(rng)), "wb") as f:
            f.write(rng.randbytes(rng.randint(0, 60_000)))
    for name in rng.sample(blobs, min(len(blobs), rng.randint(0, 3))):
        path = os.path.join(folder, name)
        action = rng.random()
        if action < 0.4:
            os.remove(path)
        elif action < 0.7:
            with open(path, "wb") as f:
                f.write(rng.randbytes(rng.randint(1, 50_000)))
        else:
            rewrite_keeping_size_and_time(path, rng)

    if rng.random() < 0.4:
        os.makedirs(os.path.join(store, "Folders", f"night{number}", "deeper"), exist_ok=True)
        with open(os.path.join(store, "Folders", f"night{number}", "deeper", "file.txt"), "w") as f:
            f.write(f"night {number}\n")
    folders = os.path.join(store, "Folders")
    if os.path.isdir(folders) and rng.random() < 0.3:
        old = sorted(os.listdir(folders))
        if old:
            victim = os.path.join(folders, rng.choice(old))
            for root, dirs, files in os.walk(victim, topdown=False):
                for name in files:
                    os.remove(os.path.join(root, name))
                for name in dirs:
                    os.rmdir(os.path.join(root, name))
            os.rmdir(victim)

    link = os.path.join(store, "notes-link")
    action = rng.random()
    if os.path.islink(link) and action < 0.3:
        os.remove(link)
        os.symlink(rng.choice(["notes.txt", "Caches", "Settings.sqlite"]), link)
    elif os.path.islink(link) and action < 0.4:
        os.remove(link)
    elif not os.path.lexists(link):
        os.symlink("notes.txt", link)
    if rng.random() < 0.3:
        os.chmod(os.path.join(store, "notes.txt"), rng.choice([0o600, 0o644, 0o640]))
    if rng.random() < 0.3:
        with open(os.path.join(store, "notes.txt"), "a") as f:
            f.write(f"night {number}\n")


if __name__ == "__main__":
    command, store, seed = sys.argv[1], sys.argv[2], int(sys.argv[3])
    if command == "make":
        make(store, seed)
    elif command == "night":
        night(store, seed, int(sys.argv[4]))
    else:
        sys.exit(f"unknown command {command}")
