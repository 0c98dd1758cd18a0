#!/usr/bin/env python3
"""Benchmarks a store of many small files (scripts/make_store.py --files N): create,
restore and verify of storebackup beside restic's first backup, `restic restore` and
`unzip -q && sync`, as milliseconds per 1,000 files, paired ratios and peak RSS. Called by
scripts/bench --files N; prints a Markdown report (and appends it to --out if given).

    many_files.py --work DIR --pristine STORE --bin storebackup --files N [--runs N] [--out FILE]

Same method as bench.py (whose helpers it uses): interleaved runs, medians, the store
reset before each create, warm page cache, /usr/bin/time -v for peak RSS.
Standard library only.
"""
import argparse
import os
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench  # noqa: E402
from bench import Tool, find_tool, fmt_mib, paired_ratio, remove, reset_store, run_rounds  # noqa: E402


def create_tools(sb, store, pristine, work):
    out = os.path.join(work, "out")
    os.makedirs(out, exist_ok=True)
    dest = os.path.join(out, "sb")

    def fresh(_):
        reset_store(pristine, store)
        remove(dest)

    tools = [Tool("sb_create", "create", "storebackup create", lambda _: [sb, "create", store, "--to", dest],
                  prepare=fresh, check=lambda _, __: None if bench.one_zip(dest) else "no archive")]
    restic = find_tool("restic")
    if restic:
        password, repo, cache = (os.path.join(work, n) for n in ("restic-password", "restic-repo", "restic-cache"))

        def restic_prepare(_):
            reset_store(pristine, store)
            remove(repo, cache)
            subprocess.run([restic, "init", "--repo", repo, "--password-file", password, "--cache-dir", cache, "-q"],
                           check=True, stdout=subprocess.DEVNULL)
        tools.append(Tool("restic_backup", "create", "restic backup (first, fresh local repo)",
                          lambda _: [restic, "backup", "--repo", repo, "--password-file", password,
                                     "--cache-dir", cache, "-q", store], prepare=restic_prepare))
    return tools


def restore_tools(sb, store, pristine, work):
    src = os.path.join(work, "restore-src")
    target = os.path.join(work, "restore-out", "restored")
    remove(src)
    reset_store(pristine, store)
    subprocess.run([sb, "create", store, "--to", src], check=True, stdout=subprocess.DEVNULL)
    archive = bench.one_zip(src)

    def clean(_):
        parent, base = os.path.split(target)
        bench.set_aside(target, target + "_Old", target + "_New", target + "_FailedRestore",
                        os.path.join(parent, f".{base}.storebackup-lock"))
        os.makedirs(parent, exist_ok=True)
        os.sync()

    def restored(_, __):
        return None if os.path.isfile(os.path.join(target, "App.sqlite")) else f"no App.sqlite in {target}"

    tools = [Tool("sb_restore", "restore", "storebackup restore latest", prepare=clean, check=restored,
                  argv=lambda _: [sb, "restore", "latest", target, "--from", src, "--yes"]),
             Tool("unzip_sync", "restore", "unzip -q; sync (same archive)", prepare=clean, check=restored,
                  argv=lambda _: ["bash", "-c", 'unzip -q "$1" -d "$2" && sync', "_", archive, target]),
             Tool("sb_verify", "verify", "storebackup verify latest",
                  argv=lambda _: [sb, "verify", "latest", "--from", src])]
    restic = find_tool("restic")
    if restic:
        password, repo, cache = (os.path.join(work, n) for n in ("restic-password", "restic-restore-repo", "restic-cache"))
        remove(repo, cache)
        subprocess.run([restic, "init", "--repo", repo, "--password-file", password, "--cache-dir", cache, "-q"],
                       check=True, stdout=subprocess.DEVNULL)
        subprocess.run([restic, "backup", "--repo", repo, "--password-file", password, "--cache-dir", cache, "-q", store],
                       check=True, stdout=subprocess.DEVNULL)
        tools.append(Tool("restic_restore", "restore", "restic restore latest", prepare=clean,
                          argv=lambda _: [restic, "restore", "latest", "--repo", repo, "--password-file", password,
                                          "--cache-dir", cache, "-q", "--target", target]))
    return tools, clean


def report(tools, files, runs):
    by_key = {t.key: t for t in tools}
    lines = [f"## Many small files: {files:,} blobs of 1-16 KiB and a database ({runs} interleaved runs)", "",
             "| command | median | ms per 1,000 files | peak RSS |", "|---|---|---|---|"]
    for t in tools:
        per_thousand = "n/a" if t.median is None else f"{t.median * 1000 / files * 1000:.1f}"
        failed = f" ({len(t.failures)} failed)" if t.failures else ""
        lines.append(f"| {t.label}{failed} | {bench.fmt_s(t.median)} | {per_thousand} | {fmt_mib(t.peak_rss_kib)} |")
    lines += ["", "| ratio (paired) | value |", "|---|---|"]
    for label, a, b in (("create / restic backup", "sb_create", "restic_backup"),
                        ("restore / unzip -q && sync", "sb_restore", "unzip_sync"),
                        ("restore / restic restore", "sb_restore", "restic_restore")):
        value = paired_ratio(by_key.get(a), by_key.get(b))
        lines.append(f"| {label} | {'n/a' if value is None else f'{value:.2f}x'} |")
    return "\n".join(lines) + "\n"


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--work", required=True)
    parser.add_argument("--pristine", required=True)
    parser.add_argument("--bin", required=True)
    parser.add_argument("--files", type=int, required=True)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--out")
    args = parser.parse_args()
    bench.ARGS = argparse.Namespace(work=args.work, quick=True)
    # scripts/bench makes the scratch folder; run by hand, the script makes it itself.
    os.makedirs(args.work, exist_ok=True)
    with open(os.path.join(args.work, "restic-password"), "w") as f:
        f.write("bench-password-not-secret\n")
    store = os.path.join(args.work, "Stores")
    creates = create_tools(args.bin, store, args.pristine, args.work)
    run_rounds(creates, args.runs, "create")
    restores, clean = restore_tools(args.bin, store, args.pristine, args.work)
    run_rounds(restores, args.runs, "restore and verify")
    clean(0)
    bench.discard_set_aside()
    text = report(creates + restores, args.files, args.runs)
    print(text)
    if args.out:
        with open(args.out, "a") as f:
            f.write("\n" + text)


if __name__ == "__main__":
    main()
