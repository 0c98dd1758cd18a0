#!/usr/bin/env python3
"""Page hashes of a SQLite database as a reader sees it: the main file with the committed
frames of its WAL laid over it. Read with plain reads: no SQLite connection, no lock, nothing
written (closing the last connection to a database in WAL mode checkpoints and deletes the WAL,
which a benchmark must not do behind the store's back).

    hashes = page_hashes(path)              # bytes: DIGEST bytes per page, page 1 first
    changed = changed_pages(before, after)  # page numbers that differ or are new in after

    python3 page_hashes.py DB [--save FILE] [--against FILE]
        # prints {"pages", "page_size", "changed"}: with --against, the pages that differ
        # from the hashes saved there; --save keeps this database's hashes for the next call

Run it in a process of its own when another connection of the same process has the database
open: closing any file descriptor of a file drops every POSIX lock the process holds on it,
SQLite's among them (the next connection to close elsewhere would then take itself for the
last one, checkpoint and delete the WAL under the open connection).

Standard library only.
"""
import argparse
import hashlib
import json
import os
import struct
import sys

DIGEST = 16
WAL_HEADER = 32
FRAME_HEADER = 24
CHUNK_PAGES = 256


def page_size_of(header):
    size = struct.unpack(">H", header[16:18])[0]
    return 65536 if size == 1 else size


def wal_checksum(data, big_endian, s0, s1):
    """SQLite's WAL checksum over data (a multiple of 8 bytes), continuing from (s0, s1)."""
    words = struct.unpack(f"{'>' if big_endian else '<'}{len(data) // 4}I", data)
    mask = 0xFFFFFFFF
    for i in range(0, len(words), 2):
        s0 = (s0 + words[i] + s1) & mask
        s1 = (s1 + words[i + 1] + s0) & mask
    return s0, s1


def committed_frames(wal_path, page_size):
    """({page number: offset of its newest committed frame's data}, pages after the last
    commit or None): the valid prefix of the WAL (salts and checksums as SQLite's recovery
    checks them), up to its last commit frame."""
    try:
        f = open(wal_path, "rb")
    except FileNotFoundError:
        return {}, None
    with f:
        header = f.read(WAL_HEADER)
        if len(header) < WAL_HEADER:
            return {}, None
        magic, _, wal_page_size, _, salt1, salt2, c0, c1 = struct.unpack(">8I", header)
        if magic not in (0x377F0682, 0x377F0683) or wal_page_size != page_size:
            return {}, None
        big_endian = magic & 1
        s0, s1 = wal_checksum(header[:24], big_endian, 0, 0)
        if (s0, s1) != (c0, c1):
            return {}, None
        committed, pending, pages = {}, {}, None
        offset = WAL_HEADER
        while True:
            frame = f.read(FRAME_HEADER + page_size)
            if len(frame) < FRAME_HEADER + page_size:
                break
            number, commit, fsalt1, fsalt2, f0, f1 = struct.unpack(">6I", frame[:FRAME_HEADER])
            if (fsalt1, fsalt2) != (salt1, salt2) or number == 0:
                break
            s0, s1 = wal_checksum(frame[:8], big_endian, s0, s1)
            s0, s1 = wal_checksum(frame[FRAME_HEADER:], big_endian, s0, s1)
            if (s0, s1) != (f0, f1):
                break
            pending[number] = offset + FRAME_HEADER
            if commit:
                committed.update(pending)
                pending.clear()
                pages = commit
            offset += FRAME_HEADER + page_size
        return committed, pages


def page_hashes(path):
    """DIGEST bytes of BLAKE2b per page of the database at path, as a reader sees it."""
    with open(path, "rb") as main:
        header = main.read(100)
        page_size = page_size_of(header)
        frames, pages = committed_frames(path + "-wal", page_size)
        if pages is None:
            in_header = struct.unpack(">I", header[28:32])[0]
            pages = in_header or os.fstat(main.fileno()).st_size // page_size
        out = bytearray()
        wal = open(path + "-wal", "rb") if frames else None
        try:
            main.seek(0)
            number = 1
            while number <= pages:
                chunk = main.read(page_size * min(CHUNK_PAGES, pages - number + 1))
                for start in range(0, len(chunk), page_size):
                    if number in frames:
                        wal.seek(frames[number])
                        page = wal.read(page_size)
                    else:
                        page = chunk[start:start + page_size]
                    out += hashlib.blake2b(page, digest_size=DIGEST).digest()
                    number += 1
                if not chunk:  # a WAL that grew the database past the main file's end
                    for missing in range(number, pages + 1):
                        page = b""
                        if missing in frames:
                            wal.seek(frames[missing])
                            page = wal.read(page_size)
                        out += hashlib.blake2b(page, digest_size=DIGEST).digest()
                    break
        finally:
            if wal:
                wal.close()
        return bytes(out)


def changed_pages(before, after):
    """Page numbers (1-based) whose hash differs between two page_hashes() results, and the
    pages after's database has beyond before's."""
    count = len(after) // DIGEST
    old = len(before) // DIGEST
    return [i + 1 for i in range(count)
            if i >= old or before[i * DIGEST:(i + 1) * DIGEST] != after[i * DIGEST:(i + 1) * DIGEST]]


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("db")
    parser.add_argument("--save", help="write this database's page hashes to FILE")
    parser.add_argument("--against", help="count the pages that differ from the hashes in FILE")
    args = parser.parse_args()
    hashes = page_hashes(args.db)
    with open(args.db, "rb") as f:
        page_size = page_size_of(f.read(100))
    result = {"pages": len(hashes) // DIGEST, "page_size": page_size}
    if args.against:
        with open(args.against, "rb") as f:
            result["changed"] = len(changed_pages(f.read(), hashes))
    if args.save:
        with open(args.save + ".tmp", "wb") as f:
            f.write(hashes)
        os.replace(args.save + ".tmp", args.save)
    print(json.dumps(result))


if __name__ == "__main__":
    main()
