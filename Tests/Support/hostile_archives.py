#!/usr/bin/env python3
"""Builds hand-crafted hostile backup archives for HostileArchiveTests.

Usage: hostile_archives.py list
       hostile_archives.py build CASE OUT.zip
       hostile_archives.py build-all FOLDER   (every refused case, as FOLDER/CASE.zip)

Every archive is written byte by byte (local headers, central directory, end records)
so that it can lie in ways zipfile refuses to: sizes that disagree, names with NUL or
control bytes, entries sharing bytes, huge declared counts. Apart from the one lie a
case is about, each archive is a well-formed storebackup backup: a real SQLite database,
a manifest with correct SHA-256s, Unix modes.
"""
import hashlib
import json
import os
import sqlite3
import struct
import sys
import tempfile
import zlib

MTIME = 946684800  # 2000-01-01


def deflate(data):
    compressor = zlib.compressobj(6, zlib.DEFLATED, -15)
    return compressor.compress(data) + compressor.flush()


def database_bytes():
    with tempfile.TemporaryDirectory() as folder:
        path = os.path.join(folder, "App.sqlite")
        db = sqlite3.connect(path)
        db.execute("CREATE TABLE t(id INTEGER PRIMARY KEY, x TEXT)")
        db.executemany("INSERT INTO t(x) VALUES (?)", [("row %d" % i,) for i in range(200)])
        db.commit()
        db.close()
        with open(path, "rb") as f:
            return f.read()


class Entry:
    def __init__(self, name, content=b"", kind="file", method=8, mode=None):
        self.name = name if isinstance(name, bytes) else name.encode()
        self.content = content
        self.kind = kind
        self.method = method if content else 0
        self.mode = mode if mode is not None else {"file": 0o100644, "dir": 0o40755, "link": 0o120777}[kind]
        self.stored = deflate(content) if self.method == 8 else content
        self.crc = zlib.crc32(content) & 0xFFFFFFFF
        self.size = len(content)          # declared uncompressed size
        self.comp_size = len(self.stored)  # declared compressed size
        self.offset_override = None        # central directory points elsewhere
        self.zip64 = False
        self.flags = 0x800  # names are UTF-8

    def manifest_row(self):
        path = self.name.decode("utf-8", "replace").rstrip("/")
        row = {"path": path, "type": {"file": "file", "dir": "directory", "link": "symlink"}[self.kind],
               "size": len(self.content) if self.kind == "file" else 0,
               "mode": self.mode & 0o7777, "mtime": MTIME}
        if self.kind == "file":
            row["sha256"] = hashlib.sha256(self.content).hexdigest()
        if self.kind == "link":
            row["sha256"] = hashlib.sha256(self.content).hexdigest()
            row["linkTarget"] = self.content.decode("utf-8", "replace")
        return row


def manifest_for(entries, databases=("App.sqlite",)):
    return {
        "format": 1, "tool": "storebackup", "toolVersion": "0.1.0", "hostName": "hostile",
        "sourcePath": "/nowhere/Stores", "createdAt": "2000-01-01T00:00:00Z", "compressionLevel": 6,
        "rootMode": 0o755, "rootMtime": MTIME,
        "files": [e.manifest_row() for e in entries],
        "databases": [{"path": p, "pageSize": 4096, "pageCount": 2, "journalMode": "delete",
                       "snapshotMethod": "backup-api"} for p in databases],
    }


def manifest_entry(manifest):
    return Entry(".storebackup/manifest.json", json.dumps(manifest, indent=1).encode())


def write_zip(path, entries, declared_count=None, declared_cd_size=None, cd_padding=0):
    out = bytearray()
    offsets = []
    for e in entries:
        offsets.append(len(out))
        extra = b""
        size, comp = e.size, e.comp_size
        if e.zip64:
            extra = struct.pack("<HHQQ", 1, 16, e.size, e.comp_size)
            size = comp = 0xFFFFFFFF
        out += struct.pack("<IHHHHHIIIHH", 0x04034B50, 45 if e.zip64 else 20, e.flags, e.method, 0, 0x2821,
                           e.crc, comp, size, len(e.name), len(extra))
        out += e.name + extra + e.stored
    cd_start = len(out)
    for e, offset in zip(entries, offsets):
        extra = b""
        size, comp = e.size, e.comp_size
        if e.zip64:
            extra = struct.pack("<HHQQ", 1, 16, e.size, e.comp_size)
            size = comp = 0xFFFFFFFF
        local = e.offset_override if e.offset_override is not None else offset
        out += struct.pack("<IHHHHHHIIIHHHHHII", 0x02014B50, (3 << 8) | 45, 45 if e.zip64 else 20, e.flags, e.method,
                           0, 0x2821, e.crc, comp, size, len(e.name), len(extra), 0, 0, 0, e.mode << 16, local)
        out += e.name + extra
    out += bytes(cd_padding)  # inside the file, counted in the directory's size
    cd_size = len(out) - cd_start
    count = len(entries) if declared_count is None else declared_count
    if count > 0xFFFF:
        # ZIP64 end record and locator carry the real (here: claimed) count.
        zip64_end = len(out)
        out += struct.pack("<IQHHIIQQQQ", 0x06064B50, 44, 45, 45, 0, 0, count, count,
                           cd_size if declared_cd_size is None else declared_cd_size, cd_start)
        out += struct.pack("<IIQI", 0x07064B50, 0, zip64_end, 1)
    out += struct.pack("<IHHHHIIH", 0x06054B50, 0, 0, min(count, 0xFFFF), min(count, 0xFFFF),
                       cd_size if declared_cd_size is None else declared_cd_size, cd_start, 0)
    with open(path, "wb") as f:
        f.write(out)


def base_entries():
    return [Entry("App.sqlite", database_bytes()), Entry("notes.txt", b"hello from the backup\n")]


def with_manifest(entries, edit=None, databases=("App.sqlite",)):
    manifest = manifest_for(entries, databases)
    if edit:
        edit(manifest)
    return entries + [manifest_entry(manifest)]


def link(name, target):
    return Entry(name, target.encode(), kind="link", method=0)


def case_path(name):
    return lambda: with_manifest(base_entries() + [Entry(name, b"escaped")])


def case_links(*links, dirs=()):
    return lambda: with_manifest(base_entries() + [Entry(d, kind="dir") for d in dirs] + [link(n, t) for n, t in links])


def not_utf8():
    """Without the UTF-8 flag (so libzip takes the name as CP437): raw bytes that are not UTF-8."""
    odd = Entry(b"\xff\xfe.txt", b"x")
    odd.flags = 0
    return with_manifest(base_entries() + [odd])


def case_duplicate():
    entries = base_entries() + [Entry("notes.txt", b"second copy")]
    return with_manifest(entries)


def case_dir_and_file_same_name():
    return with_manifest(base_entries() + [Entry("data/", kind="dir"), Entry("data", b"file")])


def case_lying_size_small():
    """Central directory and manifest say 10 bytes; the data inflates to 1 MiB."""
    entries = base_entries()
    liar = Entry("big.bin", b"\0" * (1 << 20))
    liar.size = 10
    manifest = manifest_for(entries + [liar])
    manifest["files"][-1]["size"] = 10
    return entries + [liar, manifest_entry(manifest)]


def case_expansion_bomb():
    """Declares 1 MiB everywhere; the deflate stream holds 200 MiB of zeros."""
    entries = base_entries()
    bomb = Entry("bomb.bin", b"")
    bomb.method = 8
    compressor = zlib.compressobj(9, zlib.DEFLATED, -15)
    chunk = b"\0" * (1 << 20)
    bomb.stored = b"".join(compressor.compress(chunk) for _ in range(200)) + compressor.flush()
    bomb.comp_size = len(bomb.stored)
    bomb.size = 1 << 20
    bomb.crc = zlib.crc32(chunk) & 0xFFFFFFFF
    manifest = manifest_for(entries + [bomb])
    manifest["files"][-1].update(size=1 << 20, sha256=hashlib.sha256(chunk).hexdigest())
    return entries + [bomb, manifest_entry(manifest)]


def case_sizes_disagree():
    """The central directory says 5 bytes, the manifest the truth."""
    entries = base_entries()
    liar = Entry("other.txt", b"the real content is longer")
    manifest = manifest_for(entries + [liar])
    liar.size = 5
    return entries + [liar, manifest_entry(manifest)]


def case_huge_declared_size():
    """An honest-looking 1 TiB entry (ZIP64, manifest agrees): must not fit the disk."""
    entries = base_entries()
    huge = Entry("huge.bin", b"\0" * 4096)
    huge.size = 1 << 40
    huge.zip64 = True
    manifest = manifest_for(entries + [huge])
    manifest["files"][-1]["size"] = 1 << 40
    return entries + [huge, manifest_entry(manifest)]


def case_overlapping():
    entries = with_manifest(base_entries() + [Entry("copy.sqlite", database_bytes())])
    entries[2].offset_override = 0  # copy.sqlite's directory record points at App.sqlite's bytes
    return entries


def case_huge_manifest():
    entries = with_manifest(base_entries())
    entries[-1].size = 1 << 30
    return entries


def case_huge_block_size():
    entries = base_entries()
    big = Entry("big.bin", os.urandom(3 << 20))

    def edit(m):
        row = next(r for r in m["files"] if r["path"] == "big.bin")
        row["deflateBlockSize"] = 1 << 30
        row["deflateBlocks"] = [big.comp_size]
    return with_manifest(entries + [big], edit)


def case_dense_manifest():
    """A small archive whose manifest lists 20,000 files: refused before it is decoded."""
    entries = base_entries()
    row = {"path": "p", "type": "file", "size": 0, "mode": 0, "mtime": 0}
    return with_manifest(entries, lambda m: m["files"].extend(dict(row, path="%d" % i) for i in range(20_000)))


def case_largest_within_limits():
    """Many entries (49,990 with 80-byte names, about 7 MiB of central directory, close to
    the old 50,000-entry limit): restored within the ceiling the test states for it."""
    entries = base_entries() + [Entry("f/%05d-%s" % (i, "x" * 74), b"") for i in range(49_990)]
    return with_manifest(entries)


def case_within_memory_budget():
    """A store of a few thousand files with long names (2,500 entries, 240-byte names):
    restored within the 64 MiB budget."""
    entries = base_entries() + [Entry("f/%05d-%s" % (i, "x" * 240), b"") for i in range(2_500)]
    return with_manifest(entries)


def case_manifest(edit):
    return lambda: with_manifest(base_entries() + [Entry("extra.txt", b"listed")], edit)


def drop(path):
    return lambda m: m.__setitem__("files", [f for f in m["files"] if f["path"] != path])


def set_field(path, key, value):
    def edit(m):
        for f in m["files"]:
            if f["path"] == path:
                f[key] = value
    return edit


def add_file(row):
    return lambda m: m["files"].append(row)


CASES = {
    # Paths that leave the folder, one way or another.
    "slip-dotdot": case_path("../evil.txt"),
    "slip-nested": case_path("a/../../evil.txt"),
    "slip-absolute": case_path("/tmp/storebackup-evil.txt"),
    "slip-backslash": case_path("..\\evil.txt"),
    "slip-backslash-absolute": case_path("\\tmp\\storebackup-evil.txt"),
    "slip-dot-part": case_path("a/./b.txt"),
    "slip-empty-part": case_path("a//b.txt"),
    "slip-reserved-folder": case_path(".storebackup/other.json"),
    "name-nul": case_path(b"notes\x00.txt/../../evil.txt"),
    "name-newline": case_path(b"evil\nstorebackup: ok.txt"),
    "name-escape": case_path(b"\x1b[31mred.txt"),
    "name-c1-control": case_path("caf\u0085.txt"),
    "name-not-utf8": lambda: not_utf8(),
    "name-too-long": case_path("a" * 2000),
    # Links.
    "link-outside": case_links(("data/link", "../../outside")),
    "link-absolute": case_links(("link", "/etc/passwd")),
    "link-chain": case_links(("d1/l", ".."), ("passwd", "d1/l/../../etc/passwd"), dirs=("d1/",)),
    "link-through-link": case_links(("d/b", ".."), ("d/a", "b/..")),
    "link-chain-three": case_links(("x/up", ".."), ("y/up", "../x/up/.."), ("z", "y/up/../etc"), dirs=("x/", "y/")),
    "link-parent-is-link": case_links(("l", "d"), ("l/inner", "x"), dirs=("d/",)),
    "file-beneath-link": lambda: with_manifest(base_entries() + [Entry("d/", kind="dir"), link("l", "d"), Entry("l/evil.txt", b"x")]),
    "file-beneath-file": lambda: with_manifest(base_entries() + [Entry("notes.txt/evil.txt", b"x")]),
    "link-loop": case_links(("a", "b"), ("b", "a")),
    "link-control-target": case_links(("l", "notes\n.txt")),
    # Names and entries.
    "duplicate-name": case_duplicate,
    "duplicate-dir-and-file": case_dir_and_file_same_name,
    # Sizes and memory.
    "lying-size": case_lying_size_small,
    "expansion-bomb": case_expansion_bomb,
    "sizes-disagree": case_sizes_disagree,
    "huge-declared-size": case_huge_declared_size,
    "overlapping-entries": case_overlapping,
    "huge-manifest": case_huge_manifest,
    # Manifest lies.
    "manifest-wrong-sha": case_manifest(set_field("extra.txt", "sha256", "0" * 64)),
    "manifest-wrong-size": case_manifest(set_field("extra.txt", "size", 3)),
    "manifest-missing-entry": case_manifest(drop("extra.txt")),
    "manifest-extra-entry": case_manifest(add_file({"path": "ghost.txt", "type": "file", "size": 1, "sha256": "0" * 64, "mode": 420, "mtime": MTIME})),
    "manifest-wrong-type": case_manifest(set_field("extra.txt", "type", "symlink")),
    "manifest-duplicate-row": case_manifest(lambda m: m["files"].append(dict(m["files"][0]))),
    "manifest-ghost-database": case_manifest(lambda m: m["databases"].append(dict(m["databases"][0], path="ghost.sqlite"))),
    "manifest-more-rows-than-entries": case_dense_manifest,
    "manifest-not-json": lambda: base_entries() + [Entry(".storebackup/manifest.json", b"{not json")],
    "manifest-wrong-link-target": lambda: with_manifest(base_entries() + [link("l", "notes.txt")], set_field("l", "linkTarget", "App.sqlite")),
    "no-manifest": lambda: base_entries(),
}

# Not entry lists: archives whose end records lie.
RAW_CASES = {
    "huge-entry-count": lambda path: write_zip(path, with_manifest(base_entries()), declared_count=10_000_000),
    "huge-central-directory": lambda path: write_zip(path, with_manifest(base_entries()), declared_cd_size=1 << 30),
    # Millions of entries claimed by a directory of a few hundred bytes.
    "million-entries": lambda path: write_zip(path, with_manifest(base_entries()), declared_count=3_000_000),
    "over-entry-ceiling": lambda path: write_zip(path, with_manifest(base_entries()), declared_count=20_000_000),
    # A 12 MiB central directory really inside the file, for three entries.
    "padded-central-directory": lambda path: write_zip(path, with_manifest(base_entries()), cd_padding=12 << 20),
}

# Cases that must succeed with bounded memory rather than be refused.
SUCCEEDING = {"huge-block-size": case_huge_block_size, "largest-within-limits": case_largest_within_limits,
              "within-memory-budget": case_within_memory_budget}


def main():
    if sys.argv[1] == "list":
        print("\n".join(sorted(CASES) + sorted(RAW_CASES)))
        return
    if sys.argv[1] == "build-all":
        for name in sorted(CASES) + sorted(RAW_CASES):
            out = os.path.join(sys.argv[2], name + ".zip")
            if name in RAW_CASES:
                RAW_CASES[name](out)
            else:
                write_zip(out, CASES[name]())
        return
    _, _, name, out = sys.argv
    if name in RAW_CASES:
        RAW_CASES[name](out)
    else:
        write_zip(out, {**CASES, **SUCCEEDING}[name]())


if __name__ == "__main__":
    main()
