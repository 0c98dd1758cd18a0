#!/usr/bin/env python3
"""Makes the golden backups: archives written by one version of storebackup, kept as test
fixtures so that every later build is tested on restoring them (GoldenArchiveTests).

    python3 Tests/Fixtures/golden/make_golden.py --binary .build/debug/storebackup --format 1

builds a few small stores, runs `storebackup create` on each, restores each archive with the
same binary as a check, and writes under Tests/StoreBackupTests/Fixtures/golden/format-N/:

    <kind>/<date> Stores.zip   the archive
    <kind>/listing.json        the store as tree_listing.py saw it before create (an independent
                               walk: types, modes, mtimes, sizes, SHA-256, link targets, rows)

Format 3 (`create --incremental`; plain `create` still writes format 2) keeps chains instead:
each kind is a store changed night by night, one `create --incremental` a night (a full,
then incrementals on it), every archive of the chain in <kind>/, and listing.json adds
`chain`: per backup, oldest first, its name, kind, base, what it holds, the tree it restores
to, and for an incremental `in`: which backup of the chain holds each file's content (a
file: the last one in which it changed; a database: always the backup itself, as a page delta
or whole; null for the backup itself), worked out here from the trees alone.

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
import time

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
def make_blocks(root):
    """Format 4: a database of several 1 MiB blocks (each with its SHA-256 in the manifest)
    beside a small one and a file."""
    rows(os.path.join(root, "App.sqlite"), 20000, journal_mode="wal", text="block row")
    rows(os.path.join(root, "Small.sqlite"), 20, text="small row")
    write(os.path.join(root, "notes.txt"), "format 4\n")
    set_times(root, {"App.sqlite": 1_700_200_001, "Small.sqlite": 1_700_200_003, "notes.txt": 1_700_200_005, ".": 1_700_200_007})


# Format 4 (block hashes): written by any create whose store has a database over 1 MiB.
KINDS_FORMAT_4 = {
    "blocks": make_blocks,
    "encrypted-blocks": make_blocks,
}

OPTIONS = {"outside-links": ["--allow-outside-links"]}


# Format 3: chains. Each is a list of nights; a night changes the store (the first makes it)
# and says what its backup holds.


def rows(path, count, start=0, journal_mode="delete", text="row"):
    """Appends `count` rows to table t of the database at `path` (made if new, in
    `journal_mode`; an existing one keeps its own)."""
    os.makedirs(os.path.dirname(path), exist_ok=True)
    new = not os.path.exists(path)
    connection = sqlite3.connect(path)
    if new:
        connection.execute("PRAGMA journal_mode=%s" % journal_mode)
    journal_mode = connection.execute("PRAGMA journal_mode").fetchone()[0]
    connection.execute("CREATE TABLE IF NOT EXISTS t(id INTEGER PRIMARY KEY, name TEXT NOT NULL, body TEXT)")
    connection.executemany("INSERT INTO t(id, name, body) VALUES (?, ?, ?)",
                           [(i, "%s %05d" % (text, i), ("%s %d " % (text, i)) * 12) for i in range(start, start + count)])
    connection.commit()
    if journal_mode == "wal":
        connection.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    connection.close()


def update(path, sql, *parameters):
    connection = sqlite3.connect(path)
    connection.execute(sql, parameters)
    connection.commit()
    if connection.execute("PRAGMA journal_mode").fetchone()[0] == "wal":
        connection.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    connection.close()


def chain_night_0(root):
    rows(os.path.join(root, "App.sqlite"), 120, text="item")
    rows(os.path.join(root, "Logs", "Journal.sqlite"), 60, journal_mode="wal", text="entry")
    rows(os.path.join(root, "Settings.sqlite"), 5, text="setting")
    write(os.path.join(root, "notes.txt"), "never changes\n")
    write(os.path.join(root, "touched.txt"), "its time changes, not its content\n")
    write(os.path.join(root, "run.sh"), "#!/bin/sh\necho hi\n", mode=0o755)
    write(os.path.join(root, "Documents", "report.txt"), "quarterly report\n" * 20)
    write(os.path.join(root, "Documents", "draft.txt"), "a draft, removed on night 2\n", mode=0o600)
    write(os.path.join(root, "Old", "old.txt"), "a folder removed on night 2\n")
    os.symlink("notes.txt", os.path.join(root, "current"))
    set_times(root, {"App.sqlite": 1_700_000_001, "Logs/Journal.sqlite": 1_700_000_003, "Settings.sqlite": 1_700_000_005,
                     "notes.txt": 1_700_000_007, "touched.txt": 1_700_000_009, "run.sh": 1_700_000_011,
                     "Documents/report.txt": 1_700_000_013, "Documents/draft.txt": 1_700_000_015,
                     "Old/old.txt": 1_700_000_017, "current": 1_700_000_019, "Documents": 1_700_000_021,
                     "Old": 1_700_000_023, "Logs": 1_700_000_025, ".": 1_700_000_027})
    return "the whole store: App.sqlite, Settings.sqlite, Logs/Journal.sqlite (WAL), files, a link, page maps"


def chain_night_1(root):
    update(os.path.join(root, "App.sqlite"), "UPDATE t SET body = 'changed on night 1' WHERE id % 30 = 7")
    rows(os.path.join(root, "App.sqlite"), 10, start=120, text="night 1 item")
    rows(os.path.join(root, "Logs", "Journal.sqlite"), 20, start=60, text="night 1 entry")
    write(os.path.join(root, "Documents", "report.txt"), "quarterly report, revised\n" * 20)
    set_times(root, {"App.sqlite": 1_700_086_401, "Logs/Journal.sqlite": 1_700_086_403, "touched.txt": 1_700_086_405,
                     "Documents/report.txt": 1_700_086_407, "Documents": 1_700_000_021, "Logs": 1_700_086_409,
                     ".": 1_700_086_411})
    return ("page deltas of App.sqlite (rows changed and added), Logs/Journal.sqlite (rows added) and "
            "Settings.sqlite (none: unchanged); Documents/report.txt changed; touched.txt's time alone "
            "changed (its content is the full's)")


def chain_night_2(root):
    rows(os.path.join(root, "Logs", "Journal.sqlite"), 20, start=80, text="night 2 entry")
    rows(os.path.join(root, "Added.sqlite"), 8, text="added")
    os.unlink(os.path.join(root, "Documents", "draft.txt"))
    shutil.rmtree(os.path.join(root, "Old"))
    write(os.path.join(root, "Documents", "new.txt"), "added on night 2\n", mode=0o640)
    write(os.path.join(root, "Attachments", "photo.bin"), bytes((i * 31 + 7) % 251 for i in range(3000)))
    os.chmod(os.path.join(root, "run.sh"), 0o700)
    os.unlink(os.path.join(root, "current"))
    os.symlink("Documents/report.txt", os.path.join(root, "current"))
    set_times(root, {"Logs/Journal.sqlite": 1_700_172_801, "Added.sqlite": 1_700_172_803, "Documents/new.txt": 1_700_172_805,
                     "Attachments/photo.bin": 1_700_172_807, "Attachments": 1_700_172_809, "run.sh": 1_700_172_811,
                     "current": 1_700_172_813, "Documents": 1_700_172_815, "Logs": 1_700_172_817,
                     ".": 1_700_172_819})
    return ("a page delta of Logs/Journal.sqlite on night 1's (rows added), empty ones of App.sqlite and "
            "Settings.sqlite (unchanged); Added.sqlite new (whole, with a complete page map); Documents/new.txt "
            "and Attachments/ added; Documents/draft.txt and Old/ removed; run.sh's mode and the link current "
            "changed")


def encrypted_night_0(root):
    rows(os.path.join(root, "App.sqlite"), 80, text="secret item")
    write(os.path.join(root, ".secret-config"), "token=not-a-real-one\n", mode=0o600)
    write(os.path.join(root, "Attachments", "photo.bin"), bytes((i * 17 + 3) % 251 for i in range(2000)))
    write(os.path.join(root, "Attachments", "old.bin"), b"removed on night 1\n")
    set_times(root, {"App.sqlite": 1_700_000_031, ".secret-config": 1_700_000_033, "Attachments/photo.bin": 1_700_000_035,
                     "Attachments/old.bin": 1_700_000_037, "Attachments": 1_700_000_039, ".": 1_700_000_041})
    return "the whole store, AES-256, page maps keyed with the password (HMAC-SHA-256)"


def encrypted_night_1(root):
    update(os.path.join(root, "App.sqlite"), "UPDATE t SET body = 'changed on night 1' WHERE id % 20 = 3")
    rows(os.path.join(root, "App.sqlite"), 5, start=80, text="night 1 item")
    os.unlink(os.path.join(root, "Attachments", "old.bin"))
    write(os.path.join(root, "Attachments", "new.bin"), b"added on night 1\n")
    set_times(root, {"App.sqlite": 1_700_086_431, "Attachments/new.bin": 1_700_086_433, "Attachments": 1_700_086_435,
                     ".": 1_700_086_437})
    return "an encrypted page delta of App.sqlite; Attachments/old.bin removed, Attachments/new.bin added"


# The chains of format 3: the nights of each, and whether it is encrypted.
CHAINS = {
    "chain": ([chain_night_0, chain_night_1, chain_night_2], False),
    "encrypted-chain": ([encrypted_night_0, encrypted_night_1], True),
}


def holders(trees, names):
    """For the newest tree, by docs/FORMAT.md: which backup holds each file's content, the
    last whose tree gave it another type or SHA-256 than the one before (None: the newest
    itself). Folders, links and FIFOs are in every backup, and so is every database: one its
    base held with the same page size as a page delta (empty when nothing changed), any
    other whole."""
    result = {}
    for path, entry in trees[-1].items():
        holder = len(trees) - 1
        if entry["type"] == "file":
            while holder > 0:
                before = trees[holder - 1].get(path)
                if not before or before["type"] != entry["type"] or before.get("sha256") != entry["sha256"]:
                    break
                holder -= 1
        result[path] = None if holder == len(trees) - 1 else names[holder]
    return result


def make_chain(binary, kind, nights, encrypted, work, target, password_file):
    stores = os.path.join(work, kind, "Stores")
    os.makedirs(stores)
    backups = os.path.join(target, kind)
    chain, trees, names = [], [], []
    for number, night in enumerate(nights):
        holds = night(stores)
        tree = tree_listing.listing(stores)
        arguments = [binary, "create", stores, "--to", backups, "--incremental", "--max-delta-share", "1", "--json"]
        if encrypted:
            arguments += ["--encrypt", "--password-file", password_file]
        made = json.loads(run(arguments))
        wanted = "full" if number == 0 else "incremental"
        if made["kind"] != wanted or (number > 0 and made.get("base") != names[-1]):
            sys.exit("%s night %d: a %s on %s, not a %s on %s" % (kind, number, made["kind"], made.get("base"), wanted,
                                                                  names[-1] if names else None))
        names.append(made["name"])
        trees.append(tree)
        link = {"archive": made["name"], "kind": made["kind"], "holds": holds, "tree": tree}
        if number > 0:
            link["base"] = names[-2]
            link["in"] = holders(trees, names)
        chain.append(link)
        # The next backup's name must be at least a second later.
        time.sleep(1.2)
    # The check: the same binary restores each backup of the chain to its tree and lists
    # each incremental's holders as worked out above.
    password = ["--password-file", password_file] if encrypted else []
    for link in chain:
        restored = os.path.join(work, kind, "Restored-" + link["archive"][:17].replace(" ", "-"))
        run([binary, "restore", link["archive"], restored, "--from", backups, "--yes"] + password)
        differing = tree_listing.differences(link["tree"], tree_listing.listing(restored))
        if differing:
            print("\n".join(differing), file=sys.stderr)
            sys.exit("%s: %s restores differently from the store" % (kind, link["archive"]))
        if "in" in link:
            listed = json.loads(run([binary, "ls", link["archive"], "--from", backups, "--json"] + password))
            found = {entry["path"]: entry["in"] for entry in listed["entries"]}
            if found != {path: held for path, held in link["in"].items() if path != "."}:
                sys.exit("%s: ls of %s says %s, not %s" % (kind, link["archive"], found, link["in"]))
    with open(os.path.join(backups, "listing.json"), "w") as handle:
        json.dump({"archive": names[-1], "password": PASSWORD if encrypted else None, "tree": trees[-1], "chain": chain},
                  handle, indent=1, sort_keys=True, ensure_ascii=False)
        handle.write("\n")
    for name in names:
        print("%s: %s (%d bytes)" % (kind, name, os.path.getsize(os.path.join(backups, name))))


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
        if options.format == 3:
            for kind, (nights, encrypted) in CHAINS.items():
                make_chain(options.binary, kind, nights, encrypted, work, target, password_file)
            return
        kinds = dict(KINDS, **(KINDS_FROM_FORMAT_2 if options.format >= 2 else {}))
        if options.format >= 4:
            kinds = KINDS_FORMAT_4
        for kind, make in kinds.items():
            stores = os.path.join(work, kind, "Stores")
            os.makedirs(stores)
            make(stores)
            backups = os.path.join(target, kind)
            # Before create: its own connection to a WAL database makes and removes the -wal
            # and -shm files, which changes the folder's time after the scan has read it.
            expected = tree_listing.listing(stores)
            arguments = [options.binary, "create", stores, "--to", backups]
            if kind.startswith("encrypted"):
                arguments += ["--encrypt", "--password-file", password_file]
            name = run(arguments).strip().splitlines()[-1]
            # The check: the same binary restores exactly what the listing says.
            restored = os.path.join(work, kind, "Restored")
            restore = [options.binary, "restore", name, restored, "--from", backups, "--yes"] + OPTIONS.get(kind, [])
            if kind.startswith("encrypted"):
                restore += ["--password-file", password_file]
            run(restore)
            differing = tree_listing.differences(expected, tree_listing.listing(restored))
            if differing:
                print("\n".join(differing), file=sys.stderr)
                sys.exit("%s: the restored tree differs from the store" % kind)
            with open(os.path.join(backups, "listing.json"), "w") as handle:
                extra = {"options": OPTIONS[kind]} if kind in OPTIONS else {}
                json.dump(dict({"archive": name, "password": PASSWORD if kind.startswith("encrypted") else None,
                                "tree": expected}, **extra), handle, indent=1, sort_keys=True, ensure_ascii=False)
                handle.write("\n")
            print("%s: %s (%d bytes)" % (kind, name, os.path.getsize(os.path.join(backups, name))))
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
