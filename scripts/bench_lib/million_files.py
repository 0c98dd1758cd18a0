#!/usr/bin/env python3
"""One run of create, verify and restore on a store of a million small files
(scripts/make_store.py --files N --blob-kib 1-1), each with its time and peak RSS, then an
independent comparison of the restored tree with the original. Called by
scripts/bench --million; prints a Markdown section (and appends it to --out if given).

    million_files.py --work DIR --pristine STORE --bin storebackup [--out FILE]

The comparison walks both trees with os.lstat and hashes every file itself (not the
project's manifest or verify): kind, permission bits, modification time in seconds,
size, SHA-256 of the contents, link targets; databases (found by their header) by their
rows, since a restored database holds its WAL's pages checkpointed; -wal and -shm files
are not compared (the backup holds each database as one consistent file).
Standard library only.
"""
import argparse
import hashlib
import os
import sqlite3
import stat
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench  # noqa: E402
from bench import fmt_mib, remove, timed  # noqa: E402

SQLITE_HEADER = b"SQLite format 3\x00"


def is_database(path):
    with open(path, "rb") as f:
        return f.read(16) == SQLITE_HEADER


def database_rows(path):
    """Every table's rows, sorted, read through a read-only connection."""
    db = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        tables = [row[0] for row in db.execute("SELECT name FROM sqlite_master WHERE type='table' ORDER BY name")]
        return {table: sorted(db.execute(f'SELECT * FROM "{table}"').fetchall(), key=repr) for table in tables}
    finally:
        db.close()


def describe(root):
    """{relative path (bytes): what must come back} for everything under root."""
    listing = {}
    root_bytes = os.fsencode(root)
    for folder, dirs, names in os.walk(root_bytes):
        for name in dirs + names:
            full = os.path.join(folder, name)
            rel = os.path.relpath(full, root_bytes)
            if rel.endswith(b"-wal") or rel.endswith(b"-shm"):
                continue
            info = os.lstat(full)
            mode = stat.S_IMODE(info.st_mode)
            if stat.S_ISLNK(info.st_mode):
                listing[rel] = ("link", os.readlink(full))
            elif stat.S_ISDIR(info.st_mode):
                listing[rel] = ("dir", mode, int(info.st_mtime))
            elif stat.S_ISREG(info.st_mode) and is_database(full):
                listing[rel] = ("database", mode)
            elif stat.S_ISREG(info.st_mode):
                with open(full, "rb") as f:
                    digest = hashlib.file_digest(f, "sha256").hexdigest()
                listing[rel] = ("file", mode, int(info.st_mtime), info.st_size, digest)
            else:
                listing[rel] = ("special", stat.S_IFMT(info.st_mode), mode)
    return listing


def differences(original, restored):
    """Up to ten lines describing what differs (empty: identical)."""
    before, after = describe(original), describe(restored)
    found = []
    for rel in sorted(set(before) | set(after)):
        a, b = before.get(rel), after.get(rel)
        if a != b:
            found.append(f"{os.fsdecode(rel)}: {a} != {b}")
        elif a[0] == "database":
            if database_rows(os.path.join(original, os.fsdecode(rel))) != database_rows(
                    os.path.join(restored, os.fsdecode(rel))):
                found.append(f"{os.fsdecode(rel)}: rows differ")
        if len(found) >= 10:
            break
    return found, len(before)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--work", required=True)
    parser.add_argument("--pristine", required=True)
    parser.add_argument("--bin", required=True)
    parser.add_argument("--out")
    args = parser.parse_args()
    bench.ARGS = argparse.Namespace(work=args.work, quick=True)
    dest = os.path.join(args.work, "backups")
    target = os.path.join(args.work, "restored")
    remove(dest, target, target + "_Old", target + "_New")
    os.sync()

    steps = [("create", [args.bin, "create", args.pristine, "--to", dest]),
             ("verify latest", [args.bin, "verify", "latest", "--from", dest]),
             ("restore latest", [args.bin, "restore", "latest", target, "--from", dest, "--yes"])]
    rows = []
    for label, argv in steps:
        bench.log(f"million files: {label}")
        run = timed(argv)
        if run.rc != 0:
            sys.exit(f"million_files: {label} failed ({run.rc}): {bench.tail(run.stderr)}")
        rows.append((label, run))
    bench.log("million files: comparing the restored tree with the original (independent walk)")
    found, entries = differences(args.pristine, target)

    lines = [f"## A million small files: {entries:,} files and folders (one run)", "",
             "| command | time | ms per 1,000 entries | peak RSS |", "|---|---|---|---|"]
    for label, run in rows:
        lines.append(f"| storebackup {label} | {bench.fmt_s(run.seconds)} | "
                     f"{run.seconds * 1000 / entries * 1000:.1f} | {fmt_mib(run.rss_kib)} |")
    verdict = ("identical (kind, mode, time, size, SHA-256, link targets; databases by rows)" if not found
               else "DIFFERENT: " + "; ".join(found))
    lines += ["", f"Restored tree against the original, by an independent walk: {verdict}.", ""]
    text = "\n".join(lines)
    print(text)
    if args.out:
        with open(args.out, "a") as f:
            f.write("\n" + text)
    if found:
        sys.exit(1)


if __name__ == "__main__":
    main()
