#!/usr/bin/env python3
"""Nightly incremental backups on a generated store: what a day of work costs.

    python3 incremental.py --work DIR --pristine STORE --bin STOREBACKUP [--runs N]
                           [--nights N] [--seed S] [--out FILE]

The day's work (issue 35's workload): 1 % of App.sqlite's rows updated at random, 16,000
rows inserted, 32 new blobs of 128 KiB. Measured, in paired runs on the same store:

- bytes: the nightly incremental's archive against the deflated size (level 1, the
  default) of the database pages that changed plus the new blobs: what an ideal delta holds;
- create: `create --incremental` (an incremental on the previous night) against a plain
  full `create` of the same store;
- restore: `restore latest` of a full plus N incrementals against `restore latest` of one
  full of the same final state;
- peak RSS of each (from /usr/bin/time -v).

Prints a Markdown section, and appends it to FILE with --out. Standard library only.
"""
import argparse
import os
import random
import shutil
import sqlite3
import subprocess
import sys
import time
import uuid
import zlib

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import bench  # noqa: E402
from bench import fmt_mib, fmt_s, log, remove, reset_store, timed, verdict  # noqa: E402

BLOB = 128 << 10


def day_of_work(store, rng):
    """Updates 1 % of the rows, inserts 16,000, adds 32 blobs; returns the new blob paths."""
    db = sqlite3.connect(os.path.join(store, "App.sqlite"), isolation_level=None)
    db.execute("PRAGMA journal_mode=WAL")
    (count,) = db.execute("SELECT max(id) FROM items").fetchone()
    db.execute("BEGIN")
    for row in rng.sample(range(1, count + 1), max(1, count // 100)):
        db.execute("UPDATE items SET amount = amount + 1, title = title || '.' WHERE id = ?", (row,))
    db.executemany(
        "INSERT INTO items(created_at, title, body, amount) VALUES (?, ?, ?, ?)",
        ((f"2026-11-27T{i % 24:02d}:00:00Z", f"new item {i}", "bought " * rng.randint(5, 60), i) for i in range(16000)))
    db.execute("COMMIT")
    db.close()
    blobs = os.path.join(store, ".App_SUPPORT", "_EXTERNAL_DATA")
    os.makedirs(blobs, exist_ok=True)
    made = []
    for _ in range(32):
        path = os.path.join(blobs, str(uuid.UUID(int=rng.getrandbits(128))).upper())
        with open(path, "wb") as f:
            f.write(rng.randbytes(BLOB // 2) + (b"structured text line\n" * (BLOB // 2 // 21 + 1))[: BLOB // 2])
        made.append(path)
    return made


def snapshot_database(store, copy):
    """A consistent copy of App.sqlite (the backup API), as create's snapshot reads it."""
    source = sqlite3.connect(os.path.join(store, "App.sqlite"))
    target = sqlite3.connect(copy)
    source.backup(target)
    target.close()
    source.close()


def ideal_delta_bytes(before, after, new_files):
    """Deflated bytes (level 1) of the pages of `after` that differ from `before`, plus new files."""
    page_size = sqlite3.connect(after).execute("PRAGMA page_size").fetchone()[0]
    total = 0
    changed = 0
    pages = 0
    with open(before, "rb") as old, open(after, "rb") as new:
        while True:
            page = new.read(page_size)
            if not page:
                break
            pages += 1
            if old.read(page_size) != page:
                changed += 1
                compressor = zlib.compressobj(1, zlib.DEFLATED, -15)
                total += len(compressor.compress(page) + compressor.flush()) + 4
    for path in new_files:
        with open(path, "rb") as f:
            compressor = zlib.compressobj(1, zlib.DEFLATED, -15)
            total += len(compressor.compress(f.read()) + compressor.flush())
    return total, changed, pages


def paired_ratio(ours, theirs):
    """The median of the per-round ratios (each round ran both back to back)."""
    ratios = sorted(a / b for a, b in zip(ours, theirs))
    return ratios[len(ratios) // 2]


def newest(folder):
    names = sorted(n for n in os.listdir(folder) if n.endswith(" Stores.zip"))
    return os.path.join(folder, names[-1]) if names else None


def run(argv, what):
    proc = subprocess.run([str(a) for a in argv], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    if proc.returncode != 0:
        sys.exit(f"incremental bench: {what} failed: {proc.stderr.decode(errors='replace')[-800:]}")


def state_folder(store):
    parent, name = os.path.split(store.rstrip("/"))
    return os.path.join(parent, f".{name}.storebackup-chains")


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--work", required=True)
    parser.add_argument("--pristine", required=True)
    parser.add_argument("--bin", required=True)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--nights", type=int, default=6)
    parser.add_argument("--seed", type=int, default=35)
    parser.add_argument("--out")
    args = parser.parse_args()
    bench.ARGS = args
    sb, work = args.bin, args.work
    rng = random.Random(args.seed)
    store = os.path.join(work, "store")
    chain = os.path.join(work, "chain")
    reset_store(args.pristine, store)

    log("incremental: the first full of the chain")
    run([sb, "create", store, "--to", chain, "--incremental"], "the chain's first full")
    before = os.path.join(work, "before.sqlite")
    remove(before)
    snapshot_database(store, before)
    new_files = day_of_work(store, rng)
    after = os.path.join(work, "after.sqlite")
    remove(after)
    snapshot_database(store, after)
    ideal, changed, pages = ideal_delta_bytes(before, after, new_files)
    remove(before, after)

    # Paired: the night's incremental and a plain full of the same store, alternately; the
    # chain's state and folder are put back before each incremental.
    saved_state = os.path.join(work, "saved-state")
    remove(saved_state)
    shutil.copytree(state_folder(store), saved_state, symlinks=True)
    full_dest = os.path.join(work, "full")
    incremental_times, full_times, incremental_rss, full_rss, sizes = [], [], [], [], []
    base_names = set(os.listdir(chain))
    for round_index in range(args.runs):
        for kind in ("incremental", "full") if round_index % 2 == 0 else ("full", "incremental"):
            os.sync()
            if kind == "incremental":
                for name in set(os.listdir(chain)) - base_names:
                    os.remove(os.path.join(chain, name))
                remove(state_folder(store))
                shutil.copytree(saved_state, state_folder(store), symlinks=True)
                result = timed([sb, "create", store, "--to", chain, "--incremental"])
                incremental_times.append(result.seconds)
                incremental_rss.append(result.rss_kib)
                made = set(os.listdir(chain)) - base_names
                if result.rc != 0 or len(made) != 1 or " incremental on " not in next(iter(made)):
                    sys.exit(f"incremental bench: the nightly create did not make one incremental: {made} {result.stderr[-400:]}")
                sizes.append(os.path.getsize(os.path.join(chain, next(iter(made)))))
            else:
                remove(full_dest)
                result = timed([sb, "create", store, "--to", full_dest])
                full_times.append(result.seconds)
                full_rss.append(result.rss_kib)
                if result.rc != 0:
                    sys.exit(f"incremental bench: the full create failed: {result.stderr[-400:]}")

    # A chain of a full and N incrementals, against one full of the final state.
    log(f"incremental: {args.nights - 1} more nights")
    for _ in range(args.nights - 1):
        day_of_work(store, rng)
        run([sb, "create", store, "--to", chain, "--incremental"], "a nightly incremental")
    chain_names = sorted(n for n in os.listdir(chain) if n.endswith(" Stores.zip"))
    final_full = os.path.join(work, "final-full")
    remove(final_full)
    run([sb, "create", store, "--to", final_full], "the final full")
    target = os.path.join(work, "restored")
    chain_times, one_times, chain_rss, one_rss = [], [], [], []
    for round_index in range(args.runs):
        for kind in ("chain", "one") if round_index % 2 == 0 else ("one", "chain"):
            bench.set_aside(target, target + "_Old", target + "_New", target + "_FailedRestore")
            os.sync()
            source = chain if kind == "chain" else final_full
            result = timed([sb, "restore", "latest", target, "--from", source, "--yes"])
            if result.rc != 0:
                sys.exit(f"incremental bench: restore of the {kind} failed: {result.stderr[-400:]}")
            (chain_times if kind == "chain" else one_times).append(result.seconds)
            (chain_rss if kind == "chain" else one_rss).append(result.rss_kib)
    remove(target, target + "_Old")
    bench.discard_set_aside()

    median = lambda values: sorted(values)[len(values) // 2]  # noqa: E731
    size = median(sizes)
    full_size = os.path.getsize(newest(full_dest))
    bytes_limit = 1.1 * ideal + 1_000_000
    create_ratio = paired_ratio(incremental_times, full_times)
    restore_ratio = paired_ratio(chain_times, one_times)
    peak = max(incremental_rss + chain_rss)
    lines = [
        "## Incremental nightly backups",
        "",
        f"The day's work: 1 % of the rows updated, 16,000 inserted, 32 new blobs of 128 KiB; {changed:,} of "
        f"{pages:,} database pages changed. {args.runs} paired runs, medians; chain of one full and "
        f"{len(chain_names) - 1} incrementals.",
        "",
        "| | storebackup | reference | ratio | target | |",
        "|---|---|---|---|---|---|",
        f"| bytes of the nightly incremental | {size / 1e6:.1f} MB | ideal delta {ideal / 1e6:.1f} MB "
        f"(a full: {full_size / 1e6:.1f} MB) | {size / max(1, ideal):.2f}x | <= 1.1x + 1 MB | "
        f"{'PASS' if size <= bytes_limit else 'FAIL'} |",
        f"| create --incremental | {fmt_s(median(incremental_times))} | full create {fmt_s(median(full_times))} | "
        f"{create_ratio:.2f}x | <= 0.50x | {verdict(create_ratio, 0.50)} |",
        f"| restore of full + {len(chain_names) - 1} incrementals | {fmt_s(median(chain_times))} | one full "
        f"{fmt_s(median(one_times))} | {restore_ratio:.2f}x | <= 1.30x | {verdict(restore_ratio, 1.30)} |",
        f"| peak RSS (incremental create, chain restore) | {fmt_mib(max(incremental_rss))}, {fmt_mib(max(chain_rss))} | "
        f"full create {fmt_mib(max(full_rss))}, one-full restore {fmt_mib(max(one_rss))} | | <= 64 MiB | "
        f"{'PASS' if peak <= 64 * 1024 else 'FAIL'} |",
        "",
    ]
    text = "\n".join(lines)
    print(text)
    if args.out:
        with open(args.out, "a") as f:
            f.write("\n" + text)


if __name__ == "__main__":
    start = time.time()
    main()
    log(f"incremental: done in {time.time() - start:.0f} s")
