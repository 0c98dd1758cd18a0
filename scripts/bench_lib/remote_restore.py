#!/usr/bin/env python3
"""Restore from S3 while downloading (issue 36's target), measured on a generated store.

    python3 remote_restore.py --work DIR --pristine STORE --bin STOREBACKUP [--runs N]
                              [--rate 50M] [--out FILE]

The store's backup is put on rclone's S3 server on loopback, once reached directly and
once through a paced link (pacer.py: RATE bytes per second, decimal, shared by all
connections). Measured in interleaved rounds:

- `storebackup restore` from S3 through the link (streamed: parallel ranged requests,
  unpacked as they arrive) against max(`rclone copy` of the archive through the same
  link, `storebackup restore` of the same backup from a local folder): the target is
  at most 1.15;
- the same restore downloading first (`STOREBACKUP_STREAMING_RESTORE=off`, as before)
  through the link, for comparison;
- on plain loopback: streamed against downloading first (target: no slower, <= 1.0 plus noise).

Ratios are medians of per-round ratios (each round runs every command back to back).
Prints a Markdown section, and appends it to FILE with --out. Standard library only.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import bench  # noqa: E402
from s3server import s3_env, start_s3, stop_servers  # noqa: E402
from bench import Tool, fmt_s, log, remove, reset_store, run_rounds, tree_size, verdict  # noqa: E402

MiB = 1 << 20


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--work", required=True)
    parser.add_argument("--pristine", required=True)
    parser.add_argument("--bin", required=True)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--rate", default="50M")
    parser.add_argument("--out")
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    bench.ARGS = args
    sb, work = args.bin, args.work
    rclone = bench.find_tool("rclone")
    root = os.path.join(work, "s3-remote-restore")
    remove(root)
    os.makedirs(root)
    server = start_s3(root)
    pacer = None
    try:
        env = s3_env(server, HOME=work)
        store = os.path.join(work, "Stores")
        local = os.path.join(work, "remote-restore-local")
        remove(local)
        reset_store(args.pristine, store)
        made = subprocess.run([sb, "create", store, "--to", local], check=True, env=env, stdout=subprocess.PIPE)
        name = made.stdout.decode().strip().splitlines()[-1]
        archive = os.path.join(local, name)
        subprocess.run([sb, "copy", name, "--from", local, "--to", "s3://bench/rr", "--s3-endpoint", server["endpoint"]],
                       check=True, env=env, stdout=subprocess.DEVNULL)
        pacer = subprocess.Popen([sys.executable, os.path.join(HERE, "pacer.py"), "--upstream",
                                  server["endpoint"].split("//", 1)[1].rstrip("/"), "--rate", args.rate],
                                 stdout=subprocess.PIPE)
        paced = f"http://127.0.0.1:{json.loads(pacer.stdout.readline())['port']}"
        rclone_conf = os.path.join(root, "rclone-client.conf")
        open(rclone_conf, "w").close()
        rclone_env = dict(env, RCLONE_CONFIG=rclone_conf, RCLONE_CONFIG_PACED_TYPE="s3", RCLONE_CONFIG_PACED_PROVIDER="Other",
                          RCLONE_CONFIG_PACED_ENDPOINT=paced, RCLONE_CONFIG_PACED_ACCESS_KEY_ID=server["access_key"],
                          RCLONE_CONFIG_PACED_SECRET_ACCESS_KEY=server["secret_key"],
                          RCLONE_CONFIG_PACED_REGION=server.get("region", "us-east-1"),
                          RCLONE_CONFIG_PACED_FORCE_PATH_STYLE="true")
        plain_env = dict(env, STOREBACKUP_STREAMING_RESTORE="off")
        target = os.path.join(work, "remote-restore-out", "Stores")
        downloaded = os.path.join(work, "remote-restore-rclone")

        def clean(_):
            parent, base = os.path.split(target)
            bench.set_aside(target, target + "_Old", target + "_New", os.path.join(parent, f".{base}.storebackup-lock"),
                            downloaded)
            os.makedirs(parent, exist_ok=True)
            os.sync()

        def restored(_, __):
            return None if os.path.isfile(os.path.join(target, "App.sqlite")) else f"no App.sqlite in {target}"

        def fetched(_, __):
            got = os.path.join(downloaded, name)
            return None if os.path.isfile(got) and os.path.getsize(got) == os.path.getsize(archive) else "rclone fetched nothing"

        def restore(endpoint):
            return lambda _: [sb, "restore", name, target, "--from", "s3://bench/rr", "--s3-endpoint", endpoint, "--yes"]

        tools = [
            Tool("rclone", "download", f"rclone copy of the archive through the {args.rate}B/s link",
                 lambda _: [rclone, "copy", f"paced:bench/rr/{name}", downloaded], prepare=clean, check=fetched,
                 env=rclone_env),
            Tool("local", "restore", "storebackup restore from a local folder",
                 lambda _: [sb, "restore", name, target, "--from", local, "--yes"], prepare=clean, check=restored, env=env),
            Tool("paced", "restore", f"storebackup restore from S3 through the {args.rate}B/s link (streamed)",
                 restore(paced), prepare=clean, check=restored, env=env),
            Tool("paced_plain", "restore", f"the same, download first (STOREBACKUP_STREAMING_RESTORE=off)",
                 restore(paced), prepare=clean, check=restored, env=plain_env),
            Tool("loop", "restore", "storebackup restore from S3 on plain loopback (streamed)",
                 restore(server["endpoint"]), prepare=clean, check=restored, env=env),
            Tool("loop_plain", "restore", "the same, download first (STOREBACKUP_STREAMING_RESTORE=off)",
                 restore(server["endpoint"]), prepare=clean, check=restored, env=plain_env),
        ]
        run_rounds(tools, args.runs, "remote restore")
        clean(0)
        bench.discard_set_aside()
        by = {tool.key: tool for tool in tools}

        def ratio(numerator, denominator):
            rounds = [r for r in numerator.by_round if all(r in t.by_round for t in denominator)]
            if not rounds:
                return None
            return statistics.median(numerator.by_round[r] / max(t.by_round[r] for t in denominator) for r in rounds)

        target_ratio = ratio(by["paced"], [by["rclone"], by["local"]])
        plain_ratio = ratio(by["paced_plain"], [by["rclone"], by["local"]])
        loop_ratio = ratio(by["loop"], [by["loop_plain"]])
        lines = [
            f"### Restore from S3 while downloading ({tree_size(archive) / MiB:.0f} MiB archive, {args.runs} rounds)",
            "",
            "| command | median |",
            "|---|---|",
        ]
        lines += [f"| {tool.label} | {fmt_s(tool.median) if tool.median else 'failed'} |" for tool in tools]
        fmt = lambda value: "n/a" if value is None else f"{value:.2f}"  # noqa: E731
        lines += [
            "",
            f"- streamed restore through the link / max(rclone copy, local restore): {fmt(target_ratio)} "
            f"(target <= 1.15: {verdict(target_ratio, 1.15) if target_ratio else 'n/a'})",
            f"- download-first restore through the link / max(rclone copy, local restore): {fmt(plain_ratio)}",
            f"- streamed / download-first on plain loopback: {fmt(loop_ratio)} (target: no slower)",
            "",
        ]
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
        remove(root)


if __name__ == "__main__":
    main()
