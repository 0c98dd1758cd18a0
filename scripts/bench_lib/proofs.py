#!/usr/bin/env python3
"""Restore with database proofs against restic (issue 50's targets), on a generated store.

    python3 proofs.py --work DIR --pristine STORE --bin STOREBACKUP [--runs N] [--label TEXT]
                      [--out FILE]

Measured in interleaved rounds, each command's run back to back with the others:

- `storebackup restore` of a backup whose databases carry proofs (every byte's SHA-256
  checked, the tree synced and swapped in, `integrity_check` skipped) against
  `restic restore latest --target DIR && sync` of the same store: target at most 0.50;
- the same restore with `--check-databases` (as without a proof), for comparison;
- `storebackup create` (which checks each database beside the archive and proves it)
  against restic's first backup into a fresh repository: target at most 0.45.

Ratios are medians of per-round ratios. Prints a Markdown section, and appends it to FILE
with --out. Standard library only; restic must be installed.
"""
import argparse
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import bench  # noqa: E402
from bench import Tool, find_tool, fmt_mib, fmt_s, log, paired_ratio, remove, reset_store, run_rounds, tree_size, verdict  # noqa: E402

MiB = 1 << 20


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--work", required=True)
    parser.add_argument("--pristine", required=True)
    parser.add_argument("--bin", required=True)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--label", default="")
    parser.add_argument("--out")
    args = parser.parse_args()
    bench.ARGS = args
    work, sb = args.work, args.bin
    restic = find_tool("restic")
    if not restic:
        sys.exit("proofs.py: restic is not installed (apt-get install restic)")
    env = dict(os.environ, HOME=work, STOREBACKUP_PROOF_KEY_FILE=os.path.join(work, "proof.key"))
    store = os.path.join(work, "Stores")
    made = os.path.join(work, "proofs-made")
    target = os.path.join(work, "proofs-out", "Stores")
    password = os.path.join(work, "restic-password")
    with open(password, "w") as f:
        f.write("bench\n")
    os.chmod(password, 0o600)
    cache = os.path.join(work, "restic-cache")
    restore_repo = os.path.join(work, "proofs-restic-restore")

    # Untimed: the backup restore reads, with its proofs, and restic's repository of the same store.
    remove(made, restore_repo)
    reset_store(args.pristine, store)
    created = subprocess.run([sb, "create", store, "--to", made], check=True, env=env, stdout=subprocess.PIPE)
    name = created.stdout.decode().strip().splitlines()[-1]
    subprocess.run([restic, "init", "--repo", restore_repo, "--password-file", password, "--cache-dir", cache, "-q"],
                   check=True, stdout=subprocess.DEVNULL)
    subprocess.run([restic, "backup", "--repo", restore_repo, "--password-file", password, "--cache-dir", cache, "-q",
                    store], check=True, stdout=subprocess.DEVNULL)

    def clean_target(_):
        parent, base = os.path.split(target)
        bench.set_aside(target, target + "_Old", target + "_New", os.path.join(parent, f".{base}.storebackup-lock"))
        os.makedirs(parent, exist_ok=True)
        os.sync()

    def restored_by(proven):
        def check(_, result):
            if not os.path.isfile(os.path.join(target, "App.sqlite")):
                return f"no App.sqlite in {target}"
            said = "0 proven" not in result.stderr
            return None if said == proven else f"proofs {'not ' if proven else ''}used: {bench.tail(result.stderr, 1)}"
        return check

    def restic_restored(_, __):
        found = os.path.isfile(os.path.join(target, store.lstrip("/"), "App.sqlite"))
        return None if found else "restic restored no App.sqlite"

    create_folder = os.path.join(work, "proofs-create")
    create_repo = os.path.join(work, "proofs-restic-create")

    def fresh_create(_):
        bench.set_aside(create_folder)
        reset_store(args.pristine, store)

    def fresh_repo(_):
        bench.set_aside(create_repo)
        reset_store(args.pristine, store)
        subprocess.run([restic, "init", "--repo", create_repo, "--password-file", password, "--cache-dir", cache, "-q"],
                       check=True, stdout=subprocess.DEVNULL)

    restores = [
        Tool("sb_proven", "restore", "storebackup restore (databases proven)",
             lambda _: [sb, "restore", name, target, "--from", made, "--yes"],
             prepare=clean_target, check=restored_by(True), env=env),
        Tool("sb_checked", "restore", "storebackup restore --check-databases",
             lambda _: [sb, "restore", name, target, "--from", made, "--yes", "--check-databases"],
             prepare=clean_target, check=restored_by(False), env=env),
        Tool("restic_sync", "restore", "restic restore latest --target DIR && sync",
             lambda _: ["bash", "-c", '"$1" restore latest --repo "$2" --password-file "$3" --cache-dir "$4" -q '
                        '--target "$5" && sync', "_", restic, restore_repo, password, cache, target],
             prepare=clean_target, check=restic_restored),
    ]
    creates = [
        Tool("sb_create", "create", "storebackup create (with proofs)",
             lambda _: [sb, "create", store, "--to", create_folder], prepare=fresh_create, env=env),
        Tool("restic_backup", "create", "restic backup (first, fresh local repo)",
             lambda _: [restic, "backup", "--repo", create_repo, "--password-file", password, "--cache-dir", cache,
                        "-q", store], prepare=fresh_repo),
    ]
    run_rounds(restores, args.runs, "restore with proofs")
    run_rounds(creates, args.runs, "create with proofs")
    clean_target(0)
    bench.discard_set_aside()

    by = {tool.key: tool for tool in restores + creates}
    store_mib = tree_size(args.pristine) / MiB
    label = args.label or f"{store_mib:.0f} MiB store"
    lines = [f"### Database proofs: restore against restic, {label}", "",
             f"{args.runs} interleaved rounds; ratios are medians of per-round ratios.", "",
             "| command | median | peak RSS |", "|---|---|---|"]
    for tool in restores + creates:
        median = fmt_s(tool.median) if tool.median else "failed"
        lines.append(f"| {tool.label} | {median} | {fmt_mib(tool.peak_rss_kib)} |")
    proven = paired_ratio(by["sb_proven"], by["restic_sync"])
    checked = paired_ratio(by["sb_checked"], by["restic_sync"])
    create = paired_ratio(by["sb_create"], by["restic_backup"])
    rss = by["sb_proven"].peak_rss_kib
    lines += ["", "| Target | Measured | Limit | Result |", "|---|---|---|---|",
              f"| restore with proofs ≤ 0.50 × `restic restore && sync`, {label} | "
              f"{'n/a' if proven is None else f'{proven:.2f}×'} | ≤ 0.50× | **{verdict(proven, 0.50)}** |",
              f"| peak RSS of that restore | {fmt_mib(rss)} | ≤ 64 MiB | **{verdict(None if rss is None else rss / 1024, 64)}** |",
              f"| create with proofs ≤ 0.45 × restic's first backup, {label} | "
              f"{'n/a' if create is None else f'{create:.2f}×'} | ≤ 0.45× | **{verdict(create, 0.45)}** |",
              "", f"Without proofs (`--check-databases`), restore is "
              f"{'n/a' if checked is None else f'{checked:.2f}×'} `restic restore && sync`.", ""]
    report = "\n".join(lines)
    print(report)
    if args.out:
        with open(args.out, "a") as out:
            out.write("\n" + report)


if __name__ == "__main__":
    main()
