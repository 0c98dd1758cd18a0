#!/usr/bin/env python3
"""A concurrent writer: commits a small transaction every few milliseconds into an
app database and records how long each commit took.

    python3 writer.py DB --out FILE.json [--interval-ms 5] [--duration S]
                         [--stop-file PATH] [--ready-file PATH] [--synchronous NORMAL]
                         [--update-random] [--seq-table TABLE] [--seed N]

Opens DB the way an app does (WAL mode, busy_timeout 5000 ms) and, on a fixed
schedule (one tick every --interval-ms; a late tick is not made up with a burst),
runs BEGIN IMMEDIATE / INSERT one row into items / COMMIT (with --update-random: an
UPDATE of one random row's amount instead). The latency of a commit is the time from
BEGIN to the end of COMMIT, so it includes any wait for a lock.
With --seq-table TABLE (a one-row table with a column seq; made if missing), every commit
also sets seq to the next number (continuing from the table's value), so that a backup's
copy of the database says which commits it holds.
Stops after --duration seconds or as soon as --stop-file exists, whichever is first.
Writes --ready-file (empty) once the first commit has been made.

FILE.json: {"clock": "monotonic", "interval_ms": .., "samples": [[start, latency], ..],
"errors": [[start, latency, message], ..]}; times in seconds on CLOCK_MONOTONIC, which
is shared by all processes of the machine, so a caller can cut a window out of it.
With --seq-table also "acks": [[seq, acknowledged, latency, row], ..]: acknowledged in
Unix seconds (time.time() at the end of COMMIT, to compare with other logs), row the id
the commit wrote.

Standard library only.
"""
import argparse
import json
import os
import random
import sqlite3
import sys
import time


def start_seq(db, table):
    """The table's current seq, after making the one-row table if it is missing."""
    db.execute(f"CREATE TABLE IF NOT EXISTS {table}(id INTEGER PRIMARY KEY CHECK (id = 1), seq INTEGER NOT NULL)")
    db.execute(f"INSERT OR IGNORE INTO {table}(id, seq) VALUES (1, 0)")
    return db.execute(f"SELECT seq FROM {table}").fetchone()[0]


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("db")
    parser.add_argument("--out", required=True)
    parser.add_argument("--interval-ms", type=float, default=5.0)
    parser.add_argument("--duration", type=float, default=3600.0, help="seconds (default: until the stop file)")
    parser.add_argument("--stop-file")
    parser.add_argument("--ready-file")
    parser.add_argument("--synchronous", default="NORMAL", choices=["OFF", "NORMAL", "FULL"])
    parser.add_argument("--update-random", action="store_true", help="update one random row instead of inserting")
    parser.add_argument("--seq-table", help="one-row table whose seq each commit advances (logged in acks)")
    parser.add_argument("--seed", type=int, default=52)
    args = parser.parse_args()
    if not os.path.exists(args.db):
        sys.exit(f"writer: {args.db} does not exist")

    db = sqlite3.connect(args.db, isolation_level=None, timeout=5.0)
    db.execute("PRAGMA busy_timeout=5000")
    mode = db.execute("PRAGMA journal_mode=WAL").fetchone()[0]
    if mode.lower() != "wal":
        sys.exit(f"writer: {args.db} is in {mode} mode, not WAL")
    db.execute(f"PRAGMA synchronous={args.synchronous}")
    insert = "INSERT INTO items(created_at, title, body, amount) VALUES (?, ?, ?, ?)"
    body = "Added while a backup may be running: milk, bread, eggs and coffee for the weekend."
    rng = random.Random(args.seed)
    last_id = (db.execute("SELECT max(id) FROM items").fetchone()[0] or 1) if args.update_random else 0
    seq = start_seq(db, args.seq_table) if args.seq_table else 0
    acks = []

    clock = time.monotonic
    interval = args.interval_ms / 1000.0
    samples, errors = [], []
    start = clock()
    deadline = start + args.duration
    tick = start
    count = 0
    while True:
        now = clock()
        if now >= deadline or (args.stop_file and os.path.exists(args.stop_file)):
            break
        if tick > now:
            time.sleep(tick - now)
        began = clock()
        try:
            db.execute("BEGIN IMMEDIATE")
            if args.update_random:
                row = rng.randint(1, last_id)
                db.execute("UPDATE items SET amount = ? WHERE id = ?", (rng.randint(1, 99999), row))
            else:
                db.execute(insert, (time.strftime("%Y-%m-%d %H:%M:%S"), f"Live write {count}", body, count))
                row = db.execute("SELECT last_insert_rowid()").fetchone()[0] if args.seq_table else None
            if args.seq_table:
                db.execute(f"UPDATE {args.seq_table} SET seq = ?", (seq + 1,))
            db.execute("COMMIT")
            latency = clock() - began
            samples.append((began, latency))
            if args.seq_table:
                seq += 1
                acks.append((seq, round(time.time(), 4), latency, row))
        except sqlite3.Error as error:
            errors.append((began, clock() - began, str(error)))
            try:
                db.execute("ROLLBACK")
            except sqlite3.Error:
                pass
        count += 1
        if count == 1 and args.ready_file:
            open(args.ready_file, "w").close()
        # Next tick on the fixed schedule; if we are already past it, start from now.
        tick += interval
        if tick < clock():
            tick = clock()
    db.close()

    with open(args.out + ".tmp", "w") as f:
        json.dump({"clock": "monotonic", "interval_ms": args.interval_ms,
                   "samples": samples, "errors": errors, **({"acks": acks} if args.seq_table else {})}, f)
    os.replace(args.out + ".tmp", args.out)


if __name__ == "__main__":
    main()
