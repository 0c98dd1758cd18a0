#!/usr/bin/env python3
"""Delta restore against a full restore (issue 51's targets), on a generated store.

    python3 delta_restore.py --work DIR --pristine STORE --bin STOREBACKUP [--runs N]
                             [--rate 50M] [--out FILE]

Last night's backup is made of the pristine store (with a proof key, as on the machine that
made it); then a day of work changes the live store, and the restore of last night's backup
is timed, in interleaved rounds, each run starting from the same day's store:

- append-mostly day: 16,000 rows appended, 0.1 % of the rows updated among the newest 5 %
  (an app that appends edits what is recent), 32 new blobs:
  `restore --delta` against a full `restore`, from a local folder (target at most 0.40),
  and from S3 through the paced link against a full streamed restore (target at most 0.20);
- the same day with its 0.1 % of updates spread over the whole table (no target: it shows
  what block granularity costs, each block holds about 257 pages);
- random day: 1 % of the rows updated at random (every 1 MiB block changes):
  `restore --delta` against a full `restore` from a local folder (target at most 1.1).

Ratios are medians of per-round ratios. Prints a Markdown section, and appends it to FILE
with --out. Standard library only.
"""
import argparse
import json
import os
import random
import sqlite3
import subprocess
import sys
import uuid

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import bench  # noqa: E402
from s3server import s3_env, start_s3, stop_servers  # noqa: E402
from bench import Tool, fmt_s, log, paired_ratio, remove, reset_store, run_rounds, tree_size, verdict  # noqa: E402

MiB = 1 << 20
BLOB = 128 << 10


def day(store, rng, updated_fraction, newest_fraction, appended, blobs):
    """One day of work on the live store's App.sqlite and its blobs."""
    db = sqlite3.connect(os.path.join(store, "App.sqlite"), isolation_level=None)
    db.execute("PRAGMA journal_mode=WAL")
    (count,) = db.execute("SELECT max(id) FROM items").fetchone()
    first = max(1, int(count * (1 - newest_fraction)))
    db.execute("BEGIN")
    for row in rng.sample(range(first, count + 1), max(1, int(count * updated_fraction))):
        db.execute("UPDATE items SET amount = amount + 1, title = title || '.' WHERE id = ?", (row,))
    db.executemany(
        "INSERT INTO items(created_at, title, body, amount) VALUES (?, ?, ?, ?)",
        ((f"2026-12-05T{i % 24:02d}:00:00Z", f"new item {i}", "bought " * rng.randint(5, 60), i) for i in range(appended)))
    db.execute("COMMIT")
    db.close()
    folder = os.path.join(store, ".App_SUPPORT", "_EXTERNAL_DATA")
    os.makedirs(folder, exist_ok=True)
    for _ in range(blobs):
        with open(os.path.join(folder, str(uuid.UUID(int=rng.getrandbits(128))).upper()), "wb") as f:
            f.write(rng.randbytes(BLOB // 2) + (b"structured text line\n" * (BLOB // 2 // 21 + 1))[: BLOB // 2])


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--work", required=True)
    parser.add_argument("--pristine", required=True)
    parser.add_argument("--bin", required=True)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--rate", default="50M")
    parser.add_argument("--out")
    args = parser.parse_args()
    bench.ARGS = args
    sb, work = args.bin, args.work
    root = os.path.join(work, "s3-delta-restore")
    remove(root)
    os.makedirs(root)
    server = start_s3(root)
    pacer = None
    days = {key: os.path.join(work, f"delta-day-{key}") for key in ("append", "spread", "random")}
    try:
        env = s3_env(server, HOME=work, STOREBACKUP_PROOF_KEY_FILE=os.path.join(work, "proof.key"))
        store = os.path.join(work, "Stores")
        local = os.path.join(work, "delta-restore-local")
        remove(local, *days.values())
        reset_store(args.pristine, store)
        made = subprocess.run([sb, "create", store, "--to", local], check=True, env=env, stdout=subprocess.PIPE)
        name = made.stdout.decode().strip().splitlines()[-1]
        archive = os.path.join(local, name)
        subprocess.run([sb, "copy", name, "--from", local, "--to", "s3://bench/dr", "--s3-endpoint", server["endpoint"]],
                       check=True, env=env, stdout=subprocess.DEVNULL)
        log("delta restore: making the days of work")
        rng = random.Random(51)
        for key, (updated, newest, appended, blobs) in {
            "append": (0.001, 0.05, 16000, 32), "spread": (0.001, 1.0, 16000, 32), "random": (0.01, 1.0, 0, 0)
        }.items():
            reset_store(args.pristine, days[key])
            day(days[key], rng, updated, newest, appended, blobs)
        pacer = subprocess.Popen([sys.executable, os.path.join(HERE, "pacer.py"), "--upstream",
                                  server["endpoint"].split("//", 1)[1].rstrip("/"), "--rate", args.rate],
                                 stdout=subprocess.PIPE)
        paced = f"http://127.0.0.1:{json.loads(pacer.stdout.readline())['port']}"
        target = os.path.join(work, "delta-out", "Stores")

        def live(key):
            def prepare(_):
                parent, base = os.path.split(target)
                bench.set_aside(target + "_Old", target + "_New", os.path.join(parent, f".{base}.storebackup-lock"))
                os.makedirs(parent, exist_ok=True)
                # The day's store as the live one (only the files that differ are copied back).
                reset_store(days[key], target)
                os.sync()
            return prepare

        def restored(_, __):
            return None if os.path.isfile(os.path.join(target, "App.sqlite")) else f"no App.sqlite in {target}"

        def restore(source, *extra):
            endpoint = ["--s3-endpoint", paced] if source.startswith("s3://") else []
            return lambda _: [sb, "restore", name, target, "--from", source, *endpoint, "--yes", "--json", *extra]

        s3 = "s3://bench/dr"
        tools = [
            Tool("full", "restore", "full restore, local folder (append-mostly day's store live)",
                 restore(local), prepare=live("append"), check=restored, env=env),
            Tool("delta", "restore", "restore --delta, local folder, append-mostly day",
                 restore(local, "--delta"), prepare=live("append"), check=restored, env=env),
            Tool("delta_spread", "restore", "restore --delta, local folder, append day with updates spread",
                 restore(local, "--delta"), prepare=live("spread"), check=restored, env=env),
            Tool("full_random", "restore", "full restore, local folder (random day's store live)",
                 restore(local), prepare=live("random"), check=restored, env=env),
            Tool("delta_random", "restore", "restore --delta, local folder, random day",
                 restore(local, "--delta"), prepare=live("random"), check=restored, env=env),
            Tool("full_s3", "restore", f"full restore from S3 through the {args.rate}B/s link (streamed)",
                 restore(s3), prepare=live("append"), check=restored, env=env),
            Tool("delta_s3", "restore", f"restore --delta from S3 through the {args.rate}B/s link, append-mostly day",
                 restore(s3, "--delta"), prepare=live("append"), check=restored, env=env),
        ]
        run_rounds(tools, args.runs, "delta restore")
        live("append")(0)
        bench.discard_set_aside()
        by = {tool.key: tool for tool in tools}

        def figures(tool):
            for out in reversed(tool.stdouts):
                try:
                    delta = json.loads(out).get("delta")
                except (ValueError, AttributeError):
                    continue
                if delta:
                    return delta
            return None

        checks = [
            ("append-mostly day, local: delta / full", paired_ratio(by["delta"], by["full"]), 0.40),
            ("append-mostly day, S3 through the link: delta / full streamed", paired_ratio(by["delta_s3"], by["full_s3"]), 0.20),
            ("random day, local: delta / full", paired_ratio(by["delta_random"], by["full_random"]), 1.10),
        ]
        spread = paired_ratio(by["delta_spread"], by["full"])
        lines = [
            f"## Delta restore ({tree_size(args.pristine) / MiB:.0f} MiB store, {tree_size(archive) / MiB:.0f} MiB archive, "
            f"{args.runs} rounds)",
            "",
            "| command | median | reused | read from the backup | downloaded |",
            "|---|---|---|---|---|",
        ]
        for tool in tools:
            delta = figures(tool) or {}
            reused = f"{delta['bytesReused'] / MiB:.1f} MiB ({delta['blocksReused']} blocks)" if delta.get("used") else ""
            read = f"{delta['bytesRead'] / MiB:.1f} MiB ({delta['blocksRead']} blocks)" if delta.get("used") else ""
            down = f"{delta['bytesDownloaded'] / MiB:.1f} MiB" if "bytesDownloaded" in delta else ""
            lines.append(f"| {tool.label} | {fmt_s(tool.median) if tool.median else 'failed'} | {reused} | {read} | {down} |")
        fmt = lambda value: "n/a" if value is None else f"{value:.2f}"  # noqa: E731
        lines.append("")
        for label, value, limit in checks:
            lines.append(f"- {label}: {fmt(value)} (target <= {limit}: {verdict(value, limit)})")
        lines.append(f"- append day with its updates spread, local: delta / full: {fmt(spread)} (no target)")
        lines.append("")
        report = "\n".join(lines)
        print(report)
        if args.out:
            with open(args.out, "a") as out:
                out.write("\n" + report)
    finally:
        if pacer:
            pacer.terminate()
            pacer.wait()
        stop_servers(root)
        remove(root, *days.values())


if __name__ == "__main__":
    main()
