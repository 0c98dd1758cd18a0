#!/usr/bin/env python3
"""A second process that keeps writing to a store while tests back it up.

Each transaction moves money between two accounts (the total never changes) and
appends one row to an append-only log (ids must stay gap-free). Prints "ready" after
its first commit, runs until its stdin is closed, then prints the number of commits
and, on a second line, "busy N": the commits that failed with SQLITE_BUSY after waiting
the busy timeout (each is tried again).

    bank_writer.py DATABASE [journal_mode=DELETE] [synchronous=FULL] [busy_timeout=MS]

journal_mode=DELETE makes it a rollback-journal writer (the database is switched first).
"""
import random
import sqlite3
import sys
import threading

path = sys.argv[1]
stop = threading.Event()
threading.Thread(target=lambda: (sys.stdin.read(), stop.set()), daemon=True).start()

settings = dict(argument.split("=", 1) for argument in sys.argv[2:])
busy_timeout = int(settings.get("busy_timeout", "10000"))
db = sqlite3.connect(path, timeout=busy_timeout / 1000, isolation_level=None)
db.execute("PRAGMA busy_timeout=%d" % busy_timeout)
if "journal_mode" in settings:
    mode = db.execute("PRAGMA journal_mode=%s" % settings["journal_mode"]).fetchone()[0]
    assert mode.lower() == settings["journal_mode"].lower(), mode
# What WAL apps usually run with: the WAL is synced at checkpoints, not at every commit.
db.execute("PRAGMA synchronous=%s" % settings.get("synchronous", "NORMAL"))
rng = random.Random(7)
accounts = [row[0] for row in db.execute("SELECT id FROM accounts")]
commits = 0
busy = 0
while not stop.is_set():
    source, target = rng.sample(accounts, 2)
    amount = rng.randint(1, 50)
    try:
        db.execute("BEGIN IMMEDIATE")
        db.execute("UPDATE accounts SET balance = balance - ? WHERE id = ?", (amount, source))
        db.execute("UPDATE accounts SET balance = balance + ? WHERE id = ?", (amount, target))
        db.execute("INSERT INTO log(note) VALUES (?)", (f"{source}->{target}:{amount} " + "x" * rng.randint(0, 400),))
        db.execute("COMMIT")
    except sqlite3.OperationalError as error:
        if "locked" not in str(error) and "busy" not in str(error):
            raise
        busy += 1
        if db.in_transaction:
            db.execute("ROLLBACK")
        continue
    commits += 1
    if commits == 1:
        print("ready", flush=True)
print(commits, flush=True)
print("busy %d" % busy, flush=True)
