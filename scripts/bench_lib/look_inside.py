#!/usr/bin/env python3
"""Looking inside backups without restoring them (issue 49's targets), on a generated store.

    python3 look_inside.py --work DIR --pristine STORE --bin STOREBACKUP [--runs N]
                           [--rate 50M] [--out FILE]

Makes, from the store: a chain of 7 (a full, then 6 incrementals, each after a day of
work: incremental.py's day_of_work, 1 % of rows updated and 16,000 inserted), and beside it
two plain fulls, of the states after days 5 and 6 (two nightly backups one day apart).
Measured:

- a primary-key lookup, `storebackup sql BACKUP App.sqlite "SELECT * FROM items WHERE
  id = N"` (the whole command), in the newest full and in the chain's tip: locally (target
  <= 0.2 s) and from S3 (rclone serve s3) through a link paced at RATE bytes/s (pacer.py;
  target <= 1 s), with the bytes the link carried (target <= 1 % of the archive) and peak
  RSS (target <= 64 MiB);
- `storebackup diff` of the two fulls against extracting both databases with `storebackup
  extract` and running `sqldiff` on them (target <= 0.5x), and of the chain's points after
  days 5 and 6 against the same for those two points (target <= 0.2x).

Prints a Markdown section, and appends it to FILE with --out. Standard library only.
"""
import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import bench  # noqa: E402
import s3server  # noqa: E402
from bench import Tool, fmt_mib, fmt_s, log, remove, reset_store, run_rounds, verdict  # noqa: E402
from incremental import day_of_work  # noqa: E402

MiB = 1 << 20
DAYS = 6


def created(argv, env):
    """Runs a create; returns the backup's name."""
    proc = subprocess.run([str(a) for a in argv], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    if proc.returncode != 0:
        sys.exit(f"look-inside bench: {' '.join(map(str, argv[:3]))} failed: {proc.stderr.decode(errors='replace')[-800:]}")
    time.sleep(1.1)  # backup names are by the second
    return proc.stdout.decode().strip().splitlines()[-1]


class CountingPacer:
    """pacer.py in front of the S3 server, with the bytes it carried to the client."""

    def __init__(self, upstream, rate, count_file):
        self.count_file = count_file
        self.proc = subprocess.Popen([sys.executable, os.path.join(HERE, "pacer.py"), "--upstream", upstream, "--rate", rate,
                                      "--count-file", count_file], stdout=subprocess.PIPE)
        self.endpoint = f"http://127.0.0.1:{json.loads(self.proc.stdout.readline())['port']}"

    def carried(self):
        time.sleep(0.3)  # the relay threads note a connection's bytes when it closes
        try:
            with open(self.count_file) as f:
                return int(f.read().strip() or 0)
        except OSError:
            return None

    def stop(self):
        self.proc.terminate()
        self.proc.wait()


def paired(a, b):
    return bench.paired_ratio(a, b)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--work", required=True)
    parser.add_argument("--pristine", required=True)
    parser.add_argument("--bin", required=True)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--rate", default="50M")
    parser.add_argument("--out")
    parser.add_argument("--seed", type=int, default=49)
    args = parser.parse_args()
    bench.ARGS = args
    sb, work = args.bin, args.work
    rng = random.Random(args.seed)
    env = dict(os.environ, HOME=work)

    # ------------------------------------------------------------ the backups
    store = os.path.join(work, "Stores")
    chain, fulls = os.path.join(work, "li-chain"), os.path.join(work, "li-fulls")
    remove(chain, fulls)
    reset_store(args.pristine, store)
    started = time.monotonic()
    points = [created([sb, "create", store, "--to", chain, "--incremental"], env)]
    full_names = []
    for day in range(1, DAYS + 1):
        day_of_work(store, rng)
        if day >= DAYS - 1:
            full_names.append(created([sb, "create", store, "--to", fulls], env))
        points.append(created([sb, "create", store, "--to", chain, "--incremental"], env))
    log(f"look inside: chain of {len(points)} and 2 fulls made in {time.monotonic() - started:.0f} s")
    kinds = [n for n in sorted(os.listdir(chain)) if n.endswith(".zip")]
    if len(kinds) != DAYS + 1 or sum("incremental" in n for n in kinds) != DAYS:
        sys.exit(f"look-inside bench: expected a full and {DAYS} incrementals, got {kinds}")
    full_size = os.path.getsize(os.path.join(fulls, full_names[-1]))
    chain_size = sum(os.path.getsize(os.path.join(chain, n)) for n in kinds)
    tip_size = os.path.getsize(os.path.join(chain, points[-1]))
    import sqlite3
    (rows,) = sqlite3.connect(os.path.join(store, "App.sqlite")).execute("SELECT max(id) FROM items").fetchone()
    key = rows * 3 // 5
    query = f"SELECT * FROM items WHERE id = {key}"

    # ------------------------------------------------------------ S3 behind the paced link
    root = os.path.join(work, "s3-look-inside")
    remove(root)
    os.makedirs(root)
    server = s3server.start_s3(root)
    pacer = None
    try:
        s3_env = s3server.s3_env(server, env)
        for name in full_names[-1:]:
            subprocess.run([sb, "copy", name, "--from", fulls, "--to", "s3://bench/fulls", "--s3-endpoint", server["endpoint"]],
                           check=True, env=s3_env, stdout=subprocess.DEVNULL)
        for name in points:
            subprocess.run([sb, "copy", name, "--from", chain, "--to", "s3://bench/chain", "--s3-endpoint", server["endpoint"]],
                           check=True, env=s3_env, stdout=subprocess.DEVNULL)
        count_file = os.path.join(work, "pacer-count")
        pacer = CountingPacer(server["endpoint"].split("//", 1)[1].rstrip("/"), args.rate, count_file)
        carried = {}

        def answered(_, result):
            return None if f"{key}" in result.stdout else f"no row {key} in the answer"

        def counting(key_name):
            def prepare(_):
                remove(count_file)
            def check(round_index, result):
                problem = answered(round_index, result)
                carried.setdefault(key_name, []).append(pacer.carried())
                return problem
            return prepare, check

        def sql(name, source, extra=()):
            return lambda _: [sb, "sql", name, "App.sqlite", query, "--from", source, *extra]

        full_prepare, full_check = counting("s3_full")
        tip_prepare, tip_check = counting("s3_tip")
        lookups = [
            Tool("local_full", "sql", "lookup in the newest full, local", sql(full_names[-1], fulls), check=answered, env=env),
            Tool("local_tip", "sql", "lookup in the chain's tip, local", sql(points[-1], chain), check=answered, env=env),
            Tool("s3_full", "sql", f"lookup in the newest full, S3 through the {args.rate}B/s link",
                 sql(full_names[-1], "s3://bench/fulls", ("--s3-endpoint", pacer.endpoint)), prepare=full_prepare,
                 check=full_check, env=s3_env),
            Tool("s3_tip", "sql", f"lookup in the chain's tip, S3 through the {args.rate}B/s link",
                 sql(points[-1], "s3://bench/chain", ("--s3-endpoint", pacer.endpoint)), prepare=tip_prepare,
                 check=tip_check, env=s3_env),
        ]
        run_rounds(lookups, args.runs, "look inside: lookups")
    finally:
        if pacer:
            pacer.stop()
        s3server.stop_servers(root)
        remove(root)

    # ------------------------------------------------------------ diffs (one round each: minutes per command)
    scratch = os.path.join(work, "li-extract")
    sqldiff = bench.find_tool("sqldiff") if hasattr(bench, "find_tool") else "sqldiff"

    def clean(_):
        # Before every diff command, ours too: the last by-hand command's extracted
        # databases deleted and the disk idle, so no command is timed beside another's
        # writeback.
        remove(scratch)
        os.makedirs(scratch)
        os.sync()

    def by_hand(source, older, newer):
        script = (f'"$0" extract "$1" App.sqlite --into "$4/a" --from "$3" >/dev/null && '
                  f'"$0" extract "$2" App.sqlite --into "$4/b" --from "$3" >/dev/null && '
                  f'"{sqldiff}" "$4/a/App.sqlite" "$4/b/App.sqlite" | wc -l')
        return lambda _: ["sh", "-c", script, sb, older, newer, source, scratch]

    def ours(source, older, newer):
        return lambda _: [sb, "diff", older, newer, "App.sqlite", "--from", source]

    diffs = [
        Tool("diff_fulls", "diff", "diff of two nightly fulls one day apart", ours(fulls, *full_names), prepare=clean, env=env),
        Tool("hand_fulls", "diff", "extract both + sqldiff (the two fulls)", by_hand(fulls, *full_names), prepare=clean, env=env),
        Tool("diff_chain", "diff", "diff of the chain's points after days 5 and 6", ours(chain, points[-2], points[-1]),
             prepare=clean, env=env),
        Tool("hand_chain", "diff", "extract both + sqldiff (the two points)", by_hand(chain, points[-2], points[-1]),
             prepare=clean, env=env),
    ]
    log("look inside: diffs, 1 run each (no warm-up)")
    bench.settle()
    for tool in diffs:
        tool.run_once(0)
    clean(0)
    remove(scratch)
    by = {tool.key: tool for tool in lookups + diffs}

    # ------------------------------------------------------------ report
    def med(values):
        values = [v for v in values if v is not None]
        return statistics.median(values) if values else None

    def share(carried_bytes, size):
        return None if carried_bytes is None else carried_bytes / size

    fmt_pct = lambda value: "n/a" if value is None else f"{value * 100:.2f} %"  # noqa: E731
    fmt_x = lambda value: "n/a" if value is None else f"{value:.2f}x"  # noqa: E731
    full_share = share(med(carried.get("s3_full", [])), full_size)
    tip_share = share(med(carried.get("s3_tip", [])), tip_size)
    tip_chain_share = share(med(carried.get("s3_tip", [])), chain_size)
    lines = [
        f"### Looking inside backups ({full_size / MiB:.0f} MiB full archive; chain of {len(points)}: "
        f"{chain_size / MiB:.0f} MiB, tip {tip_size / MiB:.1f} MiB; {args.runs} rounds)",
        "",
        f"Lookup: `storebackup sql BACKUP App.sqlite \"{query}\"`, the whole command, medians.",
        "",
        "| command | median | peak RSS | bytes over the link |",
        "|---|---|---|---|",
    ]
    for tool in lookups:
        moved = med(carried.get(tool.key, [])) if tool.key.startswith("s3") else None
        moved_text = "" if moved is None else f"{moved / MiB:.2f} MiB"
        lines.append(f"| {tool.label} | {fmt_s(tool.median) if tool.median else 'failed'} | {fmt_mib(tool.peak_rss_kib)} | {moved_text} |")
    peak = max((t.peak_rss_kib or 0) for t in lookups) or None
    lines += [
        "",
        f"- local lookup, full: {fmt_s(by['local_full'].median)} (target <= 0.2 s: {verdict(by['local_full'].median, 0.2)}); "
        f"chain's tip: {fmt_s(by['local_tip'].median)} ({verdict(by['local_tip'].median, 0.2)})",
        f"- S3 lookup through the link, full: {fmt_s(by['s3_full'].median)} (target <= 1 s: {verdict(by['s3_full'].median, 1.0)}); "
        f"chain's tip: {fmt_s(by['s3_tip'].median)} ({verdict(by['s3_tip'].median, 1.0)})",
        f"- bytes moved, full: {fmt_pct(full_share)} of its archive (target <= 1 %: {verdict(full_share, 0.01)}); "
        f"chain's tip: {fmt_pct(tip_chain_share)} of the chain's archives, {fmt_pct(tip_share)} of the tip's "
        f"({verdict(tip_chain_share, 0.01)})",
        f"- peak RSS of any lookup: {fmt_mib(peak)} (target <= 64 MiB: {verdict(peak / 1024 if peak else None, 64)})",
        "",
        "| diff | time |",
        "|---|---|",
    ]
    lines += [f"| {tool.label} | {fmt_s(tool.median) if tool.median else 'failed'} |" for tool in diffs]
    fulls_ratio = paired(by["diff_fulls"], by["hand_fulls"])
    chain_ratio = paired(by["diff_chain"], by["hand_chain"])
    lines += [
        "",
        f"- two nightly fulls: diff / (extract both + sqldiff) = {fmt_x(fulls_ratio)} (target <= 0.5x: {verdict(fulls_ratio, 0.5)})",
        f"- two points of one chain: {fmt_x(chain_ratio)} (target <= 0.2x: {verdict(chain_ratio, 0.2)})",
        "",
    ]
    report = "\n".join(lines)
    print(report)
    if args.out:
        with open(args.out, "a") as out:
            out.write("\n" + report)


if __name__ == "__main__":
    main()
