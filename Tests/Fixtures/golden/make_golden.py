#!/usr/bin/env python3
"""Makes the golden backups: archives written by one version of storebackup, kept as test
fixtures so that every later build is tested on restoring them (GoldenArchiveTests).

    python3 Tests/Fixtures/golden/make_golden.py --binary .build/debug/storebackup --format 1

builds a few small stores, runs `storebackup create` on each, restores each archive with the
same binary as a check, and writes under Tests/StoreBackupTests/Fixtures/golden/format-N/:

    <kind>/<date> Stores.zip   the archive
    <kind>/listing.json        the store as tree_listing.py saw it before create (an independent
                               walk: types, modes, mtimes, sizes, SHA-256, link targets, rows)

Run it once per archive format, with the build that introduced that format; the folders of
earlier formats are never regenerated or changed. The encrypted archive's password is in
README.md beside them (a test fixture, not a secret).
"""
import argparse
import json
import os
import shutil
import sqlite3
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.abspath(os.path.join(HERE, "..", "..", ".."))
GOLDEN = os.path.join(REPO, "Tests", "StoreBackupTests", "Fixtures", "golden")
sys.path.insert(0, GOLDEN)
import tree_listing  # noqa: E402

PASSWORD = "golden-fixture-password"


def write(path, data, mode=0o644, mtime=None):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "wb") as handle:
        handle.write(data if isinstance(data, bytes) else data.encode())
    os.chmod(path, mode)
    if mtime is not None:
        os.utime(path, (mtime, mtime), follow_symlinks=False)


def database(path, journal_mode, rows, text_size=40, blobs=False):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    connection = sqlite3.connect(path)
    connection.execute("PRAGMA journal_mode=%s" % journal_mode)
    connection.execute("CREATE TABLE items(id INTEGER PRIMARY KEY, name TEXT NOT NULL, amount REAL, data BLOB)")
    connection.execute("CREATE INDEX items_name ON items(name)")
    connection.execute("CREATE TABLE meta(k TEXT PRIMARY KEY, v TEXT)")
    connection.execute("INSERT INTO meta VALUES ('journal', ?)", (journal_mode,))
    connection.executemany(
        "INSERT INTO items(name, amount, data) VALUES (?, ?, ?)",
        [("item %05d %s" % (i, "x" * (i % text_size)), i * 1.25,
          bytes((i * 7 + j) % 256 for j in range(16)) if blobs else None) for i in range(rows)])
    connection.commit()
    if journal_mode.lower() == "wal":
        connection.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    connection.close()


def set_times(root, mtimes):
    """Sets the mtime of each relative path (links not followed), deepest first."""
    for relative in sorted(mtimes, key=lambda p: -p.count("/")):
        path = root if relative == "." else os.path.join(root, relative)
        os.utime(path, (mtimes[relative], mtimes[relative]), follow_symlinks=False)


def make_plain(root):
    database(os.path.join(root, "App.sqlite"), "wal", 300)
    write(os.path.join(root, "notes.txt"), "grocery list\nmilk\n")
    write(os.path.join(root, "Documents", "report.txt"), "quarterly report\n" * 40)
    set_times(root, {"notes.txt": 1_600_000_001, "Documents/report.txt": 1_600_000_003,
                     "Documents": 1_600_000_005})


def make_encrypted(root):
    database(os.path.join(root, "App.sqlite"), "wal", 200)
    database(os.path.join(root, "Settings.sqlite"), "delete", 10)
    write(os.path.join(root, ".secret-config"), "token=not-a-real-one\n", mode=0o600)
    write(os.path.join(root, "Attachments", "photo.bin"), bytes((i * 31 + 7) % 251 for i in range(3000)))
    os.makedirs(os.path.join(root, "Caches", "Empty"))
    set_times(root, {".secret-config": 1_600_000_011, "Attachments/photo.bin": 1_600_000_013,
                     "Attachments": 1_600_000_015, "Caches/Empty": 1_500_000_017, "Caches": 1_500_000_019})


def make_links(root):
    database(os.path.join(root, "App.sqlite"), "wal", 50)
    write(os.path.join(root, "notes.txt"), "linked to\n")
    write(os.path.join(root, "Shared", "config.json"), '{"theme": "dark"}\n')
    os.symlink("notes.txt", os.path.join(root, "notes-link"))
    os.symlink("Shared", os.path.join(root, "shared-folder-link"))
    os.makedirs(os.path.join(root, "Deep", "Er"))
    os.symlink("../../Shared/config.json", os.path.join(root, "Deep", "Er", "config-link"))
    os.symlink("notes-link", os.path.join(root, "link-to-link"))
    set_times(root, {"notes.txt": 1_600_000_021, "notes-link": 1_600_000_023,
                     "shared-folder-link": 1_600_000_025, "Deep/Er/config-link": 1_600_000_027,
                     "link-to-link": 1_600_000_029, "Shared/config.json": 1_600_000_031,
                     "Shared": 1_600_000_033, "Deep/Er": 1_600_000_035, "Deep": 1_600_000_037})


def make_metadata(root):
    database(os.path.join(root, "App.sqlite"), "delete", 20)
    write(os.path.join(root, "private.txt"), "owner only\n", mode=0o600)
    write(os.path.join(root, "run.sh"), "#!/bin/sh\necho hi\n", mode=0o755)
    write(os.path.join(root, "read-only.txt"), "do not change\n", mode=0o444)
    write(os.path.join(root, "group.txt"), "group writable\n", mode=0o664)
    write(os.path.join(root, "empty-file"), b"")
    write(os.path.join(root, ".hidden-file"), "hidden\n")
    write(os.path.join(root, ".Hidden Folder", ".inner"), "hidden in hidden\n", mode=0o640)
    write(os.path.join(root, "Private", "key.txt"), "k\n", mode=0o400)
    os.chmod(os.path.join(root, "Private"), 0o700)
    os.makedirs(os.path.join(root, "Empty", "Nested", "Deeper"))
    os.makedirs(os.path.join(root, "Spaces and ünïcödé", "Ordner mit Umlauten"))
    write(os.path.join(root, "Spaces and ünïcödé", "naïve café.txt"), "unicode names\n")
    os.chmod(os.path.join(root, "Empty", "Nested"), 0o750)
    os.chmod(os.path.join(root, "Empty", "Nested", "Deeper"), 0o711)
    set_times(root, {"private.txt": 1_000_000_001, "run.sh": 1_100_000_003, "read-only.txt": 1_200_000_005,
                     "group.txt": 946_684_799, "empty-file": 86_401, ".hidden-file": 1_300_000_007,
                     ".Hidden Folder/.inner": 1_300_000_009, ".Hidden Folder": 1_300_000_011,
                     "Private/key.txt": 1_400_000_013, "Private": 1_400_000_015,
                     "Empty/Nested/Deeper": 1_500_000_017, "Empty/Nested": 1_500_000_019, "Empty": 1_500_000_021,
                     "Spaces and ünïcödé/Ordner mit Umlauten": 1_700_000_023,
                     "Spaces and ünïcödé/naïve café.txt": 1_700_000_025, "Spaces and ünïcödé": 1_700_000_027})
    os.chmod(root, 0o750)


def make_databases(root):
    database(os.path.join(root, "Main.sqlite"), "wal", 400, blobs=True)
    database(os.path.join(root, "Rollback.sqlite"), "delete", 150)
    database(os.path.join(root, "Truncate.db"), "truncate", 60)
    database(os.path.join(root, "Sub", "Nested.sqlite"), "wal", 30)
    # Found by its header, not its name.
    database(os.path.join(root, "no-extension"), "delete", 5)
    # Over 1 MiB and very compressible: stored as independently deflated 1 MiB blocks
    # (deflateBlocks in the manifest), while the archive stays small.
    big = os.path.join(root, "Large.sqlite")
    connection = sqlite3.connect(big)
    connection.execute("PRAGMA journal_mode=wal")
    connection.execute("CREATE TABLE pages(id INTEGER PRIMARY KEY, body TEXT)")
    connection.executemany("INSERT INTO pages(body) VALUES (?)", [("page %d " % i + "a" * 3000,) for i in range(900)])
    connection.commit()
    connection.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    connection.close()
    write(os.path.join(root, "readme.txt"), "several databases\n")
    set_times(root, {"readme.txt": 1_600_000_041, "Sub": 1_600_000_043})


def make_names(root):
    """Format 2: names are bytes (not UTF-8, control characters, backslashes, `%`, NFC and NFD
    spellings as two files), long paths, and the store's own `.storebackup` folder."""
    database(os.path.join(root, "App.sqlite"), "wal", 40)
    raw = os.fsencode(root)
    for name in (b"\xe9t\xe9.txt", b"tab\there", b"new\nline", b"dir\\file.txt", b"50%.txt",
                 "caf\u00e9".encode(), "cafe\u0301".encode()):
        with open(raw + b"/" + name, "wb") as handle:
            handle.write(b"named " + name + b"\n")
        os.utime(raw + b"/" + name, (1_600_000_051, 1_600_000_051))
    deep = os.path.join(root, "Deep", *(["d" * 200] * 12))
    write(os.path.join(deep, "leaf.txt"), "a path over 2,400 bytes\n", mtime=1_600_000_053)
    write(os.path.join(root, ".storebackup", "mine.txt"), "the app's own .storebackup folder\n", mtime=1_600_000_055)
    set_times(root, {".storebackup": 1_600_000_057})


def make_special(root):
    """Format 2: set-user-ID, set-group-ID and sticky bits, times before 1970 and after 2038,
    a FIFO, a hard link (restored as a copy)."""
    database(os.path.join(root, "App.sqlite"), "delete", 20)
    write(os.path.join(root, "setuid-tool"), "#!/bin/sh\n", mode=0o4755, mtime=1_600_000_061)
    write(os.path.join(root, "setgid-tool"), "#!/bin/sh\n", mode=0o2755, mtime=1_600_000_063)
    os.makedirs(os.path.join(root, "Shared-tmp"))
    os.chmod(os.path.join(root, "Shared-tmp"), 0o1777)
    write(os.path.join(root, "old.txt"), "before 1970\n", mtime=-86_400 * 365)
    write(os.path.join(root, "future.txt"), "after 2038\n", mtime=4_102_444_800)
    os.mkfifo(os.path.join(root, "pipe"), 0o640)
    write(os.path.join(root, "original.txt"), "hard linked\n", mtime=1_600_000_065)
    os.link(os.path.join(root, "original.txt"), os.path.join(root, "hard-link.txt"))
    set_times(root, {"pipe": 1_600_000_067, "Shared-tmp": 1_600_000_069})


def make_outside_links(root):
    """Format 2: links leaving the store, recorded in the manifest; verify and restore make
    them only with --allow-outside-links."""
    database(os.path.join(root, "App.sqlite"), "wal", 20)
    os.symlink("/srv/shared/config.json", os.path.join(root, "shared-config"))
    os.symlink("../SharedAssets", os.path.join(root, "assets"))
    write(os.path.join(root, "inside.txt"), "inside\n", mtime=1_600_000_071)
    os.symlink("inside.txt", os.path.join(root, "inside-link"))
    set_times(root, {"shared-config": 1_600_000_073, "assets": 1_600_000_075, "inside-link": 1_600_000_077})


KINDS = {
    "plain": make_plain,
    "encrypted": make_encrypted,
    "links": make_links,
    "metadata": make_metadata,
    "databases": make_databases,
}
# The kinds of the formats from 2 on, beside the first five.
KINDS_FROM_FORMAT_2 = {
    "names": make_names,
    "special": make_special,
    "outside-links": make_outside_links,
}
# Options that verify and restore need for a kind (kept in its listing.json).
OPTIONS = {"outside-links": ["--allow-outside-links"]}


def run(arguments, **kwargs):
    result = subprocess.run(arguments, capture_output=True, text=True, **kwargs)
    if result.returncode != 0:
        sys.exit("%s failed (%d): %s" % (" ".join(arguments), result.returncode, result.stderr))
    return result.stdout


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--binary", required=True, help="the storebackup binary that writes the archives")
    parser.add_argument("--format", type=int, required=True, help="the archive format that binary writes")
    parser.add_argument("--force", action="store_true", help="replace an existing format folder (never for a committed one)")
    options = parser.parse_args()
    target = os.path.join(GOLDEN, "format-%d" % options.format)
    if os.path.exists(target) and not options.force:
        sys.exit("%s exists: golden archives never change once committed" % target)
    shutil.rmtree(target, ignore_errors=True)
    work = tempfile.mkdtemp(prefix="golden-")
    try:
        password_file = os.path.join(work, "password")
        write(password_file, PASSWORD + "\n", mode=0o600)
        kinds = dict(KINDS, **(KINDS_FROM_FORMAT_2 if options.format >= 2 else {}))
        for kind, make in kinds.items():
            stores = os.path.join(work, kind, "Stores")
            os.makedirs(stores)
            make(stores)
            backups = os.path.join(target, kind)
            # Before create: its own connection to a WAL database makes and removes the -wal
            # and -shm files, which changes the folder's time after the scan has read it.
            expected = tree_listing.listing(stores)
            arguments = [options.binary, "create", stores, "--to", backups]
            if kind == "encrypted":
                arguments += ["--encrypt", "--password-file", password_file]
            name = run(arguments).strip().splitlines()[-1]
            # The check: the same binary restores exactly what the listing says.
            restored = os.path.join(work, kind, "Restored")
            restore = [options.binary, "restore", name, restored, "--from", backups, "--yes"] + OPTIONS.get(kind, [])
            if kind == "encrypted":
                restore += ["--password-file", password_file]
            run(restore)
            differing = tree_listing.differences(expected, tree_listing.listing(restored))
            if differing:
                print("\n".join(differing), file=sys.stderr)
                sys.exit("%s: the restored tree differs from the store" % kind)
            with open(os.path.join(backups, "listing.json"), "w") as handle:
                extra = {"options": OPTIONS[kind]} if kind in OPTIONS else {}
                json.dump(dict({"archive": name, "password": PASSWORD if kind == "encrypted" else None,
                                "tree": expected}, **extra), handle, indent=1, sort_keys=True, ensure_ascii=False)
                handle.write("\n")
            print("%s: %s (%d bytes)" % (kind, name, os.path.getsize(os.path.join(backups, name))))
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
