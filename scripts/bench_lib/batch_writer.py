#!/usr/bin/env python3
"""An app's writer that commits one batch of changes when asked and keeps its connection open
between batches, as an app does (so the WAL stays, checkpointed only by SQLite's automatic
checkpoints and by storebackup's own).

    writer = BatchWriter(store, seed=53)
    done = writer.commit_batch(rows=200, insert_share=0.1, blob=False)
    # {"seq", "updated", "inserted", "rows", "amounts", "blob_bytes"}
    writer.close()

Each batch updates the amount of random rows of App.sqlite's items (spread over the whole
table, so each batch touches other pages) and inserts a share of new rows (make_store.py's
rows, at the table's end), advances the one-row bench_seq table (writer.py's start_seq), and
with blob=True adds one new 128 KiB file to .App_SUPPORT/_EXTERNAL_DATA (half random bytes,
half text, as make_store.py's blobs). It keeps count(*) and sum(amount) of items up to date
from what it changed, so that a restored copy can be checked against the batch it should hold.

Standard library only.
"""
import os
import random
import sqlite3
import sys
import uuid

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.dirname(HERE))
from writer import start_seq  # noqa: E402
from make_store import rows as new_rows  # noqa: E402

SEQ_TABLE = "bench_seq"
BLOB_SIZE = 128 << 10


def database_state(path):
    """(seq, rows, sum of amounts) of an App.sqlite the writer wrote, opened read-only."""
    db = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        (seq,) = db.execute(f"SELECT seq FROM {SEQ_TABLE}").fetchone()
        count, amounts = db.execute("SELECT count(*), coalesce(sum(amount), 0) FROM items").fetchone()
    finally:
        db.close()
    return seq, count, amounts


class BatchWriter:
    def __init__(self, store, seed=53):
        self.store = store
        self.rng = random.Random(seed)
        self.db = sqlite3.connect(os.path.join(store, "App.sqlite"), isolation_level=None, timeout=5.0)
        self.db.execute("PRAGMA busy_timeout=5000")
        mode = self.db.execute("PRAGMA journal_mode=WAL").fetchone()[0]
        if mode.lower() != "wal":
            raise RuntimeError(f"App.sqlite is in {mode} mode, not WAL")
        self.db.execute("PRAGMA synchronous=NORMAL")
        self.seq = start_seq(self.db, SEQ_TABLE)
        self.rows, self.amounts = self.db.execute("SELECT count(*), coalesce(sum(amount), 0) FROM items").fetchone()
        (self.max_id,) = self.db.execute("SELECT max(id) FROM items").fetchone()
        self.day = 2000  # created_at days of the inserted rows, after make_store.py's

    def state(self):
        return {"seq": self.seq, "rows": self.rows, "amounts": self.amounts}

    def commit_batch(self, rows, insert_share=0.1, blob=False):
        rng, db = self.rng, self.db
        inserts = round(rows * insert_share)
        updates = rows - inserts
        delta_rows, delta_amounts = 0, 0
        db.execute("BEGIN IMMEDIATE")
        try:
            for row in rng.sample(range(1, self.max_id + 1), updates):
                found = db.execute("SELECT amount FROM items WHERE id = ?", (row,)).fetchone()
                if found is None:
                    continue
                amount = rng.randint(1, 100_000)
                db.execute("UPDATE items SET amount = ? WHERE id = ?", (amount, row))
                delta_amounts += amount - found[0]
            for created_at, title, body, amount in new_rows(rng, inserts, self.day):
                db.execute("INSERT INTO items(created_at, title, body, amount) VALUES (?, ?, ?, ?)",
                           (created_at, title, body, amount))
                delta_rows += 1
                delta_amounts += amount
            db.execute(f"UPDATE {SEQ_TABLE} SET seq = ?", (self.seq + 1,))
            db.execute("COMMIT")
        except BaseException:
            db.execute("ROLLBACK")
            raise
        self.seq += 1
        self.rows += delta_rows
        self.amounts += delta_amounts
        self.max_id += delta_rows
        self.day += 1
        blob_bytes = self.add_blob() if blob else 0
        return dict(self.state(), updated=updates, inserted=inserts, blob_bytes=blob_bytes)

    def add_blob(self):
        folder = os.path.join(self.store, ".App_SUPPORT", "_EXTERNAL_DATA")
        os.makedirs(folder, exist_ok=True)
        name = str(uuid.UUID(int=self.rng.getrandbits(128), version=4)).upper()
        text = b"attachment line, as a plist or a JSON export would be\n"
        data = self.rng.randbytes(BLOB_SIZE // 2) + (text * (BLOB_SIZE // 2 // len(text) + 1))[:BLOB_SIZE // 2]
        with open(os.path.join(folder, name), "wb") as f:
            f.write(data)
        return len(data)

    def close(self):
        self.db.close()
