#!/usr/bin/env python3
"""A second process that keeps writing to a store while tests back it up.

Each transaction moves money between two accounts (the total never changes) and
appends one row to an append-only log (ids must stay gap-free). Prints "ready" after
its first commit, runs until its stdin is closed, then prints the number of commits.
"""
import random
import sqlite3
import sys
import threading

path = sys.argv[1]
stop = threading.Event()
threading.Thread(target=lambda: (sys.stdin.read(), stop.set()), daemon=True).start()

db = sqlite3.connect(path, timeout=10, isolation_level=None)
db.execute("PRAGMA busy_timeout=10000")
# What WAL apps usually run with: the WAL is synced at checkpoints, not at every commit.
db.execute("PRAGMA synchronous=NORMAL")
rng = random.Random(7)
accounts = [row[0] for row in db.execute("SELECT id FROM accounts")]
commits = 0
while not stop.is_set():
    source, target = rng.sample(accounts, 2)
    amount = rng.randint(1, 50)
    db.execute("BEGIN IMMEDIATE")
    db.execute("UPDATE accounts SET balance = balance - ? WHERE id = ?", (amount, source))
    db.execute("UPDATE accounts SET balance = balance + ? WHERE id = ?", (amount, target))
    db.execute("INSERT INTO log(note) VALUES (?)", (f"{source}->{target}:{amount} " + "x" * rng.randint(0, 400),))
    db.execute("COMMIT")
    commits += 1
    if commits == 1:
        print("ready", flush=True)
print(commits, flush=True)
