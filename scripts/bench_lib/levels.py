#!/usr/bin/env python3
"""Levels of restore points: a simulated week of the service with `levels: on` on S3
(issue 53's targets).

    scripts/bench --levels [--quick] [--large | --store-from DIR] [--days N] [--points-per-hour N]
                  [--runs N] [--bin PATH] [--out FILE]
    python3 levels.py --work DIR --pristine STORE --bin STOREBACKUP [--days 7] [--runs 3]
                      [--points-per-hour 1] [--out FILE] [--json FILE] [--keep]
    python3 levels.py --report JSON                    # the Markdown section of a result again

    scripts/bench --levels --quick                     # 50 MiB store, 2 simulated days
    scripts/bench --levels --large --out R.md          # the targets' week on the 2 GiB store
    scripts/bench --levels --store-from DIR --days 3   # an existing store, 3 simulated days
    scripts/bench --levels --quick --points-per-hour 50  # a point nearly every minute

One job (`incremental: true`, `levels: on`, the default spans: minute 24 h, hourly 7 d,
daily 35 d) backs up a copy of the store to S3 (rclone serve s3 on loopback) through the
fault proxy without faults, which logs every request (method, bytes each way, times). Time
is simulated: each command is `storebackup run --config FILE --once` with
STOREBACKUP_TEST_NOW set to the simulated second (names, merges and retention use it; HTTP
signing the real clock), from a UTC midnight --days + 1 days before today. The first run (at
00:00 of day 0) makes the full. Then, for each simulated hour h of --days x 24:

- minute 10 (with --points-per-hour N: N minutes from 10 on, evenly spaced): the app
  (batch_writer.py, one connection open all along) commits a batch of 100-300 changed rows
  of App.sqlite (updates of random rows over the whole table, 10 % inserts), and every 6th
  hour adds a 128 KiB file; then `run --once` at that minute makes a point (a run that makes
  none stops the benchmark);
- minute 0 of the next hour: `run --once` at h+1:00, which merges the ended hour (and at
  midnight the ended day) and applies retention; the store is unchanged then, so it makes
  no point (unless full-every asks for a full). Its work is counted with hour h.

The minutes in between (the scheduler's runs that compare the fingerprint and find no
change) are not run; their CPU is estimated from BENCHMARKS.md's points section (its idle
phase) and added. Measured:

- backups at the destination at the end, by level (`list --json`), against the bound the
  spans give for --days and --points-per-hour;
- requests per simulated day (every run; the proxy's log, each request assigned to the run
  during which it started), by method, and per kind of run;
- bytes uploaded per simulated day, fulls excluded, against the day's distinct changed
  pages of App.sqlite plus the bytes of the day's new files: the pages are counted exactly,
  by page_hashes.py (the main file with the WAL's committed frames, hashed page by page at
  the start and after each day's last batch, in a process of its own), x the page size;
- bytes compaction downloaded: the GETs of points during the minute-0 runs (the fulls'
  checks after their upload and the listings are reported apart), against bytes uploaded;
- the service's CPU: user + system time of every `run --once` (os.wait4) over the simulated
  seconds, plus the idle estimate;
- restore of a backup of each level (the newest minute point, the hourly nearest the middle
  of the run, the newest daily, the chain's full) from S3 (directly, not through the proxy)
  and from a local copy (`storebackup copy NAME`, which brings each chain), with the
  service's proof key, against the restore of the full from the same source, and against
  the full restored with --check-databases (a point carries no database proof, so its
  restore checks App.sqlite), in interleaved rounds (--runs, after a warm-up round); each
  restored App.sqlite must hold the batch its backup was made after (bench_seq, count(*)
  and sum(amount) of items).

Writes a JSON result file (--json; default with --out FILE: FILE less its extension, plus
-levels.json) and a Markdown section (printed, and appended to --out). Everything it starts
is stopped on the way out, also on SIGTERM and Ctrl-C. Standard library only.
"""
import argparse
import bisect
import datetime
import json
import os
import re
import signal
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import bench  # noqa: E402
from bench import Tool, fmt_s, log, remove, reset_store, run_rounds, verdict  # noqa: E402
from batch_writer import BatchWriter, database_state  # noqa: E402
from points import fmt_bytes, fmt_pct, list_backups, name_time  # noqa: E402
from s3server import Proxy, by_method, method, object_key, start_proxy, start_s3, write_credentials  # noqa: E402

MiB = 1 << 20
BUCKET, PREFIX = "bench", "levels"
DAY, HOUR = 86400, 3600
POINT_MINUTE = 10
BLOB_EVERY_HOURS = 6
ROWS_PER_BATCH = (100, 300)
INSERT_SHARE = 0.1
# The default spans of `levels: on` (docs/levels.md) and the default full-every.
MINUTE_SPAN_H, HOURLY_SPAN_D, DAILY_SPAN_D, FULL_EVERY_D = 24, 7, 35, 7
# Rounding of the proxy's and this script's time stamps (both to 0.1 ms).
SLACK_S = 0.001
TARGETS = {"requests_per_day": 3000, "upload_vs_changes": 2.0, "restore_ratio": 1.3, "cpu_pct": 2.0,
           "download_share": 0.01}
RESTORE_LEVELS = ("full", "full-checked", "daily", "hourly", "minute")
SOURCES = {"s3": "S3", "local": "the local copy"}
MERGED = re.compile(r"merged (\d+) points into the (\w+) point (.+? Stores\.zip)")
DELETED = re.compile(r"retention: deleting (.+? Stores\.zip)")
BACKED_UP = re.compile(r"backed up as (.+? Stores\.zip)")


def is_full(name):
    return name.endswith(" Stores.zip") and " incremental on " not in name


def iso(moment):
    return datetime.datetime.fromtimestamp(moment, datetime.timezone.utc).strftime("%Y-%m-%d %H:%M")


# ------------------------------------------------------------------ one simulated run


def run_once(args, env, config, now, log_path):
    """`storebackup run --config FILE --once` at simulated second now; its CPU from wait4."""
    with open(log_path, "ab") as out:
        out.write(f"\n=== run --once at {iso(now)} ({now})\n".encode())
        out.flush()
        offset = out.tell()
        began = time.time()
        proc = subprocess.Popen([args.bin, "run", "--config", config, "--once"], env=dict(env, STOREBACKUP_TEST_NOW=str(now)),
                                stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
        try:
            _, status, usage = os.wait4(proc.pid, 0)
        except BaseException:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            raise
        proc.returncode = os.waitstatus_to_exitcode(status)
        ended = time.time()
    with open(log_path, "rb") as f:
        f.seek(offset)
        text = f.read().decode(errors="replace")
    record = {"now": now, "began": round(began, 4), "ended": round(ended, 4), "wall_s": round(ended - began, 3),
              "cpu_s": round(usage.ru_utime + usage.ru_stime, 3), "user_s": round(usage.ru_utime, 3),
              "sys_s": round(usage.ru_stime, 3), "max_rss_kib": usage.ru_maxrss, "rc": proc.returncode,
              "backed_up": [m.group(1) for m in BACKED_UP.finditer(text)],
              "merged": [{"parts": int(m.group(1)), "level": m.group(2), "name": m.group(3)} for m in MERGED.finditer(text)],
              "deleted": [m.group(1) for m in DELETED.finditer(text)]}
    if proc.returncode != 0:
        raise RuntimeError(f"run --once at {iso(now)} (STOREBACKUP_TEST_NOW={now}) failed with exit status "
                           f"{proc.returncode}:\n{bench.tail(text, 30)}")
    return record


def write_config(path, work, store, credentials, endpoint):
    lines = [f'state-directory: "{work}/state"', f'credentials: "{credentials}"', f's3-endpoint: "{endpoint}"',
             f'proof-key: "{work}/proof.key"', "stores:", "  - name: bench", f'    path: "{store}"',
             f'    destination: "s3://{BUCKET}/{PREFIX}"', "    schedule: every 1m", "    incremental: true",
             "    levels: on"]
    with open(path, "w") as f:
        f.write("\n".join(lines) + "\n")


# ------------------------------------------------------------------ the simulated week


def local_copies_bytes(store):
    """Bytes of the local copies compaction merges from (points/ in the chain state folders)."""
    parent, name = os.path.split(store)
    chains = os.path.join(parent, f".{name}.storebackup-chains")
    folders = [os.path.join(chains, c, "points") for c in (os.listdir(chains) if os.path.isdir(chains) else [])]
    return sum(bench.tree_size(f) for f in folders if os.path.isdir(f))


def point_minutes(per_hour):
    """The minutes of an hour at which the app commits and the service makes a point."""
    step = (60 - POINT_MINUTE) // per_hour
    return [POINT_MINUTE + k * step for k in range(per_hour)]


def hash_pages(app, save, against=None):
    """page_hashes.py in a process of its own (see there: this process holds the app's
    connection, whose locks a close of the file here would drop)."""
    argv = [sys.executable, os.path.join(HERE, "page_hashes.py"), app, "--save", save]
    if against:
        argv += ["--against", against]
    return json.loads(subprocess.run(argv, check=True, stdout=subprocess.PIPE).stdout)


def simulate(args, work, store, env, config):
    """The first full, then each simulated hour's batch, point and minute-0 run; returns
    (runs, batches [(simulated time, writer state)], days [{changed pages, new file bytes, load}],
    initial writer state, start of the simulated time, page size)."""
    hours = args.days * 24
    start = (int(time.time()) // DAY - args.days - 1) * DAY
    runs_log = os.path.join(work, "runs.log")
    writer = BatchWriter(store, seed=53)
    initial = writer.state()
    app = os.path.join(store, "App.sqlite")
    hashes = [os.path.join(work, "pages-a"), os.path.join(work, "pages-b")]
    first_pages = hash_pages(app, hashes[0])
    page_size = first_pages["page_size"]
    log(f"levels: {first_pages['pages']} pages of {page_size} B in App.sqlite; simulated start {iso(start)} UTC")
    runs, batches, days = [], [], []
    new_file_bytes = 0
    began = time.monotonic()
    try:
        first = run_once(args, env, config, start, runs_log)
        runs.append(dict(first, kind="first", hour=0, day=0))
        log(f"levels: first full {first['backed_up']} in {first['wall_s']:.1f} s")
        for hour in range(hours):
            at = start + hour * HOUR
            for minute in point_minutes(args.points_per_hour):
                rows = writer.rng.randint(*ROWS_PER_BATCH)
                last = minute == point_minutes(args.points_per_hour)[-1]
                batch = writer.commit_batch(rows, INSERT_SHARE,
                                            blob=last and hour % BLOB_EVERY_HOURS == BLOB_EVERY_HOURS - 1)
                batches.append((at + minute * 60, batch))
                new_file_bytes += batch["blob_bytes"]
                point = run_once(args, env, config, at + minute * 60, runs_log)
                runs.append(dict(point, kind="point", hour=hour, day=hour // 24, rows=rows))
                if not point["backed_up"]:
                    raise RuntimeError(f"no point at {iso(at + minute * 60)} after batch {batch['seq']} "
                                       f"(see {runs_log})")
            if (hour + 1) % 24 == 0:
                copies = local_copies_bytes(store)
            close = run_once(args, env, config, at + HOUR, runs_log)
            runs.append(dict(close, kind="close", hour=hour, day=hour // 24))
            if hour == 2 or (hour + 1) % 24 == 0:
                per_hour = (time.monotonic() - began) / (hour + 1)
                log(f"levels: hour {hour + 1}/{hours}: {per_hour:.1f} s of wall time per simulated hour, "
                    f"about {per_hour * (hours - hour - 1) / 60:.0f} min to go; load {os.getloadavg()[0]:.2f}")
            if (hour + 1) % 24 == 0:
                now = hash_pages(app, hashes[1], against=hashes[0])
                hashes.reverse()
                days.append({"day": hour // 24, "changed_pages": now["changed"],
                             "changed_page_bytes": now["changed"] * page_size, "new_file_bytes": new_file_bytes,
                             "pages_at_end": now["pages"], "local_copies_bytes": copies,
                             "load_1min": round(os.getloadavg()[0], 2)})
                new_file_bytes = 0
    finally:
        writer.close()
    return runs, batches, days, initial, start, page_size


# ------------------------------------------------------------------ figures


def assign_requests(entries, runs):
    """Each proxy entry to the run during which it started (the proxy stamps a request when its
    head arrives, so within the process's life; runs never overlap); returns (per-run lists,
    strays)."""
    order = sorted(range(len(runs)), key=lambda i: runs[i]["began"])
    starts = [runs[i]["began"] - SLACK_S for i in order]
    per_run = [[] for _ in runs]
    strays = []
    for entry in entries:
        started = entry.get("started", entry["time"])
        index = bisect.bisect_right(starts, started) - 1
        owner = order[index] if index >= 0 else None
        if owner is not None and started <= runs[owner]["ended"] + SLACK_S:
            per_run[owner].append(entry)
        else:
            strays.append(entry)
    return per_run, strays


def up_bytes(entries, fulls=True):
    return sum(e.get("up_bytes", 0) for e in entries
               if fulls or not is_full(object_key(e, BUCKET, PREFIX)))


def get_bytes(entries, what):
    """Bytes the GETs of entries downloaded: of points ("points", what compaction downloads
    when a local copy is missing), of fulls ("fulls": a full's check after its upload), or
    of listings of the bucket ("listings")."""
    def kind(entry):
        key = object_key(entry, BUCKET, PREFIX)
        return "listings" if not key else "fulls" if is_full(key) else "points"
    return sum(e.get("down_bytes", 0) for e in entries if method(e) == "GET" and kind(e) == what)


# The runs, by what they did.
RUN_CLASSES = (("first", "the first full (00:00 of day 0)"), ("point", "a point (after a batch)"),
               ("close", "minute 0: nothing merged"), ("close-hourly", "minute 0: the hour merged"),
               ("close-daily", "minute 0: the hour and the day merged"),
               ("close-full", "minute 0: the day merged, then a full (full-every)"))


def run_class(run):
    if run["kind"] != "close":
        return run["kind"]
    if any(is_full(n) for n in run["backed_up"]):
        return "close-full"
    levels = {m["level"] for m in run["merged"]}
    return "close-daily" if "daily" in levels else "close-hourly" if levels else "close"


def day_figures(runs, per_run, days):
    figures = []
    for day in days:
        d = day["day"]
        members = [i for i, r in enumerate(runs) if r["day"] == d]
        entries = [e for i in members for e in per_run[i]]
        closes = [e for i in members if runs[i]["kind"] == "close" for e in per_run[i]]
        changes = day["changed_page_bytes"] + day["new_file_bytes"]
        uploaded = up_bytes(entries, fulls=False)
        figures.append(dict(
            day, requests=len(entries), by_method=by_method(entries), up_bytes=up_bytes(entries),
            up_bytes_not_fulls=uploaded, down_bytes=sum(e.get("down_bytes", 0) for e in entries),
            compaction_get_bytes=get_bytes(closes, "points"), full_check_bytes=get_bytes(entries, "fulls"),
            listing_bytes=get_bytes(entries, "listings"),
            upload_vs_changes=round(uploaded / changes, 3) if changes else None,
            cpu_s=round(sum(runs[i]["cpu_s"] for i in members), 2), wall_s=round(sum(runs[i]["wall_s"] for i in members), 1),
            points=sum(1 for i in members for n in runs[i]["backed_up"] if not is_full(n)),
            fulls=sum(1 for i in members for n in runs[i]["backed_up"] if is_full(n)),
            merges={lvl: sum(1 for i in members for m in runs[i]["merged"] if m["level"] == lvl) for lvl in ("hourly", "daily")},
            deleted=sum(len(runs[i]["deleted"]) for i in members)))
    return figures


def class_figures(runs, per_run):
    """Per class of run: runs, requests (by method), GET bytes, CPU, peak RSS, wall."""
    classes = {}
    for run, mine in zip(runs, per_run):
        classes.setdefault(run_class(run), []).append((run, mine))
    figures = {}
    for key, members in classes.items():
        cpus = [r["cpu_s"] for r, _ in members]
        entries = [e for _, mine in members for e in mine]
        figures[key] = {"runs": len(members), "requests": len(entries), "methods": by_method(entries),
                        "point_get_bytes": get_bytes(entries, "points"), "full_get_bytes": get_bytes(entries, "fulls"),
                        "cpu_s": round(sum(cpus), 2), "median_cpu_s": round(statistics.median(cpus), 3),
                        "max_cpu_s": round(max(cpus), 3),
                        "max_rss_mib": round(max(r["max_rss_kib"] for r, _ in members) / 1024, 1),
                        "wall_s": round(sum(r["wall_s"] for r, _ in members), 1)}
    return figures


def idle_cpu_from_points_section(path):
    """The points section's idle phase of BENCHMARKS.md: (CPU % of a core, its text), or (None, None)."""
    try:
        with open(path) as f:
            text = f.read()
    except OSError:
        return None, None
    section = text[text.find("Restore to any minute: points"):]
    match = re.search(r"^\| idle \| ([\d.]+) min \| 0 \| ([\d.]+) s \| ([\d.]+) % \|", section, re.M)
    if not match:
        return None, None
    return float(match.group(3)), f"{match.group(2)} s of CPU in {match.group(1)} idle minutes"


def cpu_figures(runs, seconds, idle_pct):
    total = round(sum(r["cpu_s"] for r in runs), 2)
    measured_pct = 100 * total / seconds
    return {"simulated_seconds": seconds, "cpu_s": total, "runs": len(runs),
            "max_rss_mib": round(max(r["max_rss_kib"] for r in runs) / 1024, 1),
            "measured_pct": round(measured_pct, 3), "idle_estimate_pct": idle_pct,
            "with_idle_pct": round(measured_pct + idle_pct, 3) if idle_pct is not None else None}


def levels_bound(days, per_hour):
    """The most backups the default spans can keep after `days` of per_hour points an hour:
    the points of the last 24 h, plus the head of the day's last hour, which the day's merged
    point (named in the same hour) makes a minute point; an hourly for each hour of the last
    7 days; a daily for each day (and the day in progress) of the last 35; a full each
    full-every and the one the oldest kept backup needs."""
    return {"minute": MINUTE_SPAN_H * per_hour + 1, "hourly": min(days, HOURLY_SPAN_D) * 24,
            "daily": min(days, DAILY_SPAN_D) + 1, "full": min(days, DAILY_SPAN_D) // FULL_EVERY_D + 1}


def object_figures(backups, days, per_hour, bucket_objects):
    by_level = {}
    for b in backups:
        by_level[b.get("level") or b["kind"]] = by_level.get(b.get("level") or b["kind"], 0) + 1
    bound = levels_bound(days, per_hour)
    return {"backups": len(backups), "by_level": dict(sorted(by_level.items())), "bound_by_level": bound,
            "bound": sum(bound.values()),
            # One point an hour: the minute and hourly points are the same points.
            "tight_bound": (min(days, HOURLY_SPAN_D) * 24 + bound["daily"] + bound["full"]) if per_hour == 1 else None,
            "hour_points": sum(1 for b in backups if b.get("level") in ("minute", "hourly")),
            "dailies": sum(1 for b in backups if b.get("level") == "daily"), "bucket_objects": bucket_objects,
            "within_levels": all(by_level.get(k, 0) <= v for k, v in bound.items())}


# ------------------------------------------------------------------ restores


def pick_restores(backups, start, days):
    """The backups whose restore is timed: {level: backup}."""
    def newest(level):
        chosen = [b for b in backups if b.get("level") == level]
        return max(chosen, key=name_time) if chosen else None

    middle = start + days * DAY / 2 + POINT_MINUTE * 60
    hourlies = [b for b in backups if b.get("level") == "hourly"]
    fulls = [b for b in backups if b["kind"] == "full"]
    picks = {"minute": newest("minute"),
             "hourly": min(hourlies, key=lambda b: abs(name_time(b) - middle)) if hourlies else None,
             "daily": newest("daily"), "full": min(fulls, key=name_time) if fulls else None}
    return {k: v for k, v in picks.items() if v}


def expected_state(backup, batches, initial):
    """The writer's state the backup holds: after the newest batch committed at or before
    its name's time (a point is named for its run's second, a merged point for a second
    after its newest part's)."""
    made = [state for at, state in batches if at <= name_time(backup)]
    state = made[-1] if made else initial
    return {k: state[k] for k in ("seq", "rows", "amounts")}


def restore_phase(args, env, server, credentials, backups, start, batches, initial, days):
    sb = args.bin
    picks = pick_restores(backups, start, days)
    remote = ["--from", f"s3://{BUCKET}/{PREFIX}", "--s3-endpoint", server["endpoint"], "--credentials", credentials]
    local = os.path.join(args.work, "local-copy")
    os.makedirs(local, exist_ok=True)
    copied = time.monotonic()
    for pick in picks.values():
        subprocess.run([sb, "copy", pick["name"], "--from", f"s3://{BUCKET}/{PREFIX}", "--to", local,
                        "--s3-endpoint", server["endpoint"], "--credentials", credentials], env=env, check=True,
                       stdout=subprocess.DEVNULL)
    copy_seconds = time.monotonic() - copied
    target = os.path.join(args.work, "restore-out", "Stores")

    clean = bench.restore_target_cleaner(target)

    def holds(wanted):
        def check(_, __):
            try:
                seq, count, amounts = database_state(os.path.join(target, "App.sqlite"))
            except Exception as error:  # noqa: BLE001 - any failure to read is a failed restore
                return f"restored App.sqlite unreadable: {error}"
            got = {"seq": seq, "rows": count, "amounts": amounts}
            return None if got == wanted else f"restored {got}, expected {wanted}"
        return check

    # The service's proof key, as a restore on its machine finds it: the full's databases are
    # proven; points carry no proof, so their restore checks App.sqlite. "full-checked" is the
    # full restored with --check-databases, as a point's restore checks.
    proof = ["--proof-key", os.path.join(args.work, "proof.key")]
    tools = []
    for source, where in (("s3", remote), ("local", ["--from", local])):
        for level in RESTORE_LEVELS:
            backup = picks.get("full" if level == "full-checked" else level)
            if not backup:
                continue
            extra = ["--check-databases"] if level == "full-checked" else []
            tools.append(Tool(f"{source}-{level}", "restore", f"restore {level} from {source}",
                              lambda _, n=backup["name"], w=where, x=extra: [sb, "restore", n, target, *w, *proof, *x,
                                                                            "--yes", "--no-keep"],
                              prepare=clean, check=holds(expected_state(backup, batches, initial)), env=env))
    run_rounds(tools, args.runs, "levels: restores")
    clean(0)
    bench.discard_set_aside()
    by_key = {tool.key: tool for tool in tools}

    def paired(tool, other):
        if other is None:
            return None
        rounds = sorted(set(tool.by_round) & set(other.by_round))
        ratios = [tool.by_round[r] / other.by_round[r] for r in rounds]
        return round(statistics.median(ratios), 3) if ratios else None

    results = {}
    for tool in tools:
        source, level = tool.key.split("-", 1)
        backup = picks["full" if level == "full-checked" else level]
        results[tool.key] = {"source": source, "level": level, "name": backup["name"], "size": backup.get("size"),
                             "median_s": tool.median, "times": [round(t, 3) for t in tool.times],
                             "ratio_median": paired(tool, by_key.get(f"{source}-full")),
                             "ratio_vs_checked_median": paired(tool, by_key.get(f"{source}-full-checked")),
                             "failures": tool.failures}
    return {"picks": {k: v["name"] for k, v in picks.items()}, "copy_seconds": round(copy_seconds, 1),
            "local_copy_bytes": bench.tree_size(local), "results": results}


def chain_links(backups, name):
    """How many backups a restore of name reads (the backup and its bases)."""
    by_name = {b["name"]: b for b in backups}
    count = 0
    while name in by_name:
        count += 1
        name = by_name[name].get("base")
    return count


# ------------------------------------------------------------------ report


def worst(values):
    values = [v for v in values if v is not None]
    return max(values) if values else None


def pct(value, digits=2):
    return "n/a" if value is None else f"{value:.{digits}f} %"


def ratio_text(value):
    return "n/a" if value is None else f"{value:.2f}×"


def targets_table(result):
    t, obj, cpu, rst = TARGETS, result["objects"], result["cpu"], result["restore"]["results"]
    days = result["days"]
    req_max = worst(d["requests"] for d in days)
    up_worst = worst(d["upload_vs_changes"] for d in days)
    down, up = result["compaction_get_bytes"], result["up_bytes_not_fulls"]
    share = down / up if up else None
    rows = [
        ("backups at the destination at the end (list --json, by level)",
         f"{obj['backups']}: " + ", ".join(f"{k} {v}" for k, v in obj["by_level"].items()),
         f"≤ {obj['bound']} (" + " + ".join(f"{v} {k}" for k, v in obj["bound_by_level"].items()) + ")",
         "PASS" if obj["backups"] <= obj["bound"] and obj["within_levels"] else "FAIL"),
        ("requests per simulated day (every run: points, merges, retention, fulls), the most of any day",
         f"{req_max} (mean {statistics.mean(d['requests'] for d in days):.0f})", f"≤ {t['requests_per_day']}",
         verdict(req_max, t["requests_per_day"])),
        ("bytes uploaded per simulated day (fulls excluded) / (the day's distinct changed pages + new files), the "
         "worst day", f"{ratio_text(up_worst)} (days: " + ", ".join(f"{d['upload_vs_changes']:.2f}" for d in days) + ")",
         f"≤ {t['upload_vs_changes']}×", verdict(up_worst, t["upload_vs_changes"])),
    ]
    for source in ("s3", "local"):
        for level in ("daily", "hourly", "minute"):
            r = rst.get(f"{source}-{level}")
            if not r:
                continue
            full = rst[f"{source}-full"]
            rows.append((f"restore of the {level} point / restore of the full, from {SOURCES[source]} (median of the "
                         "rounds' ratios)",
                         f"{ratio_text(r['ratio_median'])} ({fmt_s(r['median_s'])} vs {fmt_s(full['median_s'])}); "
                         f"{ratio_text(r['ratio_vs_checked_median'])} vs the full with --check-databases",
                         f"≤ {t['restore_ratio']}×",
                         verdict(r["ratio_median"], t["restore_ratio"]) if not r["failures"] else "FAIL"))
    rows += [
        ("service CPU, % of one core: user + system of every run --once / the simulated seconds, + the idle minutes' "
         "estimate", f"{cpu['measured_pct']:.3f} % ({cpu['cpu_s']:.1f} s in {cpu['simulated_seconds']:,} s) + "
         f"{pct(cpu['idle_estimate_pct'])} = {pct(cpu['with_idle_pct'])}",
         f"≤ {t['cpu_pct']} %", verdict(cpu["with_idle_pct"] if cpu["with_idle_pct"] is not None else cpu["measured_pct"],
                                         t["cpu_pct"])),
        ("bytes compaction downloaded (GETs of points during the minute-0 runs) / bytes uploaded (fulls excluded)",
         f"{fmt_bytes(down)} / {fmt_bytes(up)} = {fmt_pct(share)}", f"≤ {100 * t['download_share']:.0f} %",
         verdict(share, t["download_share"])),
    ]
    lines = ["| Target | Measured | Limit | Result |", "|---|---|---|---|"]
    return lines + [f"| {a} | {b} | {c} | **{d}** |" for a, b, c, d in rows]


def days_table(result):
    methods = sorted({m for d in result["days"] for m in d["by_method"]})
    head = ("| Day | Requests | " + " | ".join(methods) + " | Uploaded (fulls excl.) | Changed pages | New files "
            "| Up / changes | Compaction GETs | Points | Merges h/d | Deleted | CPU | Wall | Load |")
    lines = [head, "|" + "---:|" * (len(methods) + 13)]
    for d in result["days"]:
        fulls = f" + {d['fulls']} full" if d["fulls"] else ""
        lines.append(
            f"| {d['day']} | {d['requests']} | " + " | ".join(str(d["by_method"].get(m, 0)) for m in methods) +
            f" | {fmt_bytes(d['up_bytes_not_fulls'])} | {d['changed_pages']} ({fmt_bytes(d['changed_page_bytes'])}) | "
            f"{fmt_bytes(d['new_file_bytes'])} | {ratio_text(d['upload_vs_changes'])} | "
            f"{fmt_bytes(d['compaction_get_bytes'])} | {d['points']}{fulls} | "
            f"{d['merges']['hourly']}/{d['merges']['daily']} | {d['deleted']} | {d['cpu_s']:.1f} s | {d['wall_s']:.0f} s | "
            f"{d['load_1min']} |")
    return lines


def runs_table(result):
    classes = result["by_run"]
    methods = sorted({m for c in classes.values() for m in c["methods"]})
    lines = ["| Runs | Count | Requests per run | " + " | ".join(methods) + " | GETs of backups | CPU | Median | Max "
             "| Peak RSS | Wall |", "|---|" + "---:|" * (8 + len(methods))]
    for key, label in RUN_CLASSES:
        c = classes.get(key)
        if not c:
            continue
        got = c["point_get_bytes"] + c["full_get_bytes"]
        lines.append(f"| {label} | {c['runs']} | {c['requests'] / c['runs']:.2f} | " +
                     " | ".join(f"{c['methods'].get(m, 0) / c['runs']:.2f}" for m in methods) +
                     f" | {fmt_bytes(got)} | {c['cpu_s']:.1f} s | {c['median_cpu_s']:.2f} s | {c['max_cpu_s']:.2f} s | "
                     f"{c['max_rss_mib']} MiB | {c['wall_s']:.0f} s |")
    cpu = result["cpu"]
    lines.append(f"| all | {cpu['runs']} | {result['requests'] / cpu['runs']:.2f} | " +
                 " | ".join(f"{result['requests_by_method'].get(m, 0) / cpu['runs']:.2f}" for m in methods) +
                 f" | {fmt_bytes(result['object_get_bytes'])} | {cpu['cpu_s']:.1f} s | | | {cpu['max_rss_mib']} MiB | "
                 f"{result['wall_runs_s']:.0f} s |")
    return lines


def restores_table(result):
    rst = result["restore"]["results"]
    lines = ["| Restore | Backup | Links | From S3 | / full | / full checked | From the local copy | / full "
             "| / full checked |", "|---|---|---:|---:|---:|---:|---:|---:|---:|"]
    for level in RESTORE_LEVELS:
        s3, loc = rst.get(f"s3-{level}"), rst.get(f"local-{level}")
        if not s3 and not loc:
            continue
        name = (s3 or loc)["name"]
        label = {"full": "full (its databases proven)", "full-checked": "full, --check-databases"}.get(level, level)

        def cells(r):
            if not r:
                return ["n/a"] * 3
            return [fmt_s(r["median_s"]), ratio_text(r["ratio_median"]), ratio_text(r["ratio_vs_checked_median"])]
        lines.append(f"| {label} | {name} | {result['links'].get(name, '?')} | " + " | ".join(cells(s3) + cells(loc)) + " |")
    return lines


def report(result):
    obj, cpu, per_hour = result["objects"], result["cpu"], result["points_per_hour"]
    minutes = point_minutes(per_hour)
    at = f"minute {minutes[0]}" if per_hour == 1 else "minutes " + ", ".join(map(str, minutes))
    lines = [f"## Levels of restore points ({result['store_mib']:.0f} MiB store, {result['days_run']} simulated days"
             f"{'' if per_hour == 1 else f', {per_hour} points an hour'})", "",
             "`storebackup run --config FILE --once` with one job (`incremental: true`, `levels: on`: minute 24 h, "
             "hourly 7 d, daily 35 d; full-every 7 d) to S3 (rclone serve s3) through the fault proxy, which logged every "
             f"request; the service's clock set by STOREBACKUP_TEST_NOW from {result['simulated_start']} UTC. The first run "
             "made the full. Then, each simulated hour, the app (one connection, open all week) committed a batch of "
             f"{ROWS_PER_BATCH[0]}-{ROWS_PER_BATCH[1]} changed rows of App.sqlite at {at} ({100 * INSERT_SHARE:.0f} % "
             "inserts, the rest updates of random rows over the whole table; a new 128 KiB file every "
             f"{BLOB_EVERY_HOURS} h) and `run --once` made a point after each batch; `run --once` at minute 0 of the next "
             "hour merged the ended hour (at midnight the ended day) and applied retention. Each figure of an hour counts "
             "its points and the minute-0 run after them (`scripts/bench --levels`, scripts/bench_lib/levels.py). The "
             f"scheduler's runs in the other {59 - per_hour} minutes of each hour, which find the store unchanged, were "
             "not run: their CPU is estimated below.", ""]
    lines += targets_table(result) + [""]
    bound = obj["bound_by_level"]
    span_days = min(result["days_run"], HOURLY_SPAN_D)
    text = (f"**Backups at the end**: {obj['backups']} ({', '.join(f'{k} {v}' for k, v in obj['by_level'].items())}; "
            f"{obj['bucket_objects']} objects under the prefix at the server). **The bound** the spans give for "
            f"{result['days_run']} days of {per_hour} point{'s' if per_hour > 1 else ''} an hour: at most "
            f"{bound['minute']} minute points (24 h × {per_hour}, and the head of the last day's last hour, which "
            f"that day's merged point, named in the same hour, makes a minute point), {bound['hourly']} hourly "
            f"({span_days} days × 24), "
            f"{bound['daily']} daily (one each simulated day, and one for the day in progress) and {bound['full']} fulls "
            f"(the first, and one each full-every of 7 d) = {obj['bound']}.")
    if obj["tight_bound"] is not None:
        text += (f" With one point an hour every point heads its hour, so the minute and hourly points are the same "
                 f"points, one an hour: the tight bound is {span_days * 24} + {bound['daily']} + {bound['full']} = "
                 f"{obj['tight_bound']}. Measured: {obj['hour_points']} hour points (minute or hourly) and "
                 f"{obj['dailies']} dailies; a minute point here is a day's last point, which the day's merged point "
                 "(named a second later in the same hour) replaced as the hour's head; retention deletes it after 24 h.")
    lines += [text, ""]
    lines += ["Per simulated day (day 0 holds the first full's run, whose bytes are left out of the uploads):", ""]
    lines += days_table(result) + [""]
    lines += [f"Changed pages: distinct pages of App.sqlite (page size {result['page_size']} B) whose content differs "
              "between the start and the end of the day, from scripts/bench_lib/page_hashes.py (the main file with "
              "the WAL's committed frames, hashed page by page, in a process of its own; new pages count), × the page "
              "size; new files: the bytes of the files the writer added. Requests: the proxy's log, each request "
              f"assigned to the run during which it started ({result['stray_requests']} outside any run).", ""]
    lines += ["Runs by what they did (requests per run by method; user + system CPU from os.wait4):", ""]
    lines += runs_table(result) + [""]
    lines += [f"Downloads: compaction read no backup ({fmt_bytes(result['compaction_get_bytes'])} of points) — it merged "
              f"from the local copies in the chain state folder (points/: at most {fmt_bytes(result['local_copies_max_bytes'])}, "
              "at a day's end before its merge); "
              f"the GETs of backups were the fulls' checks after their upload ({fmt_bytes(result['full_check_bytes'])}); "
              f"listings of the bucket returned {fmt_bytes(result['listing_bytes'])}."
              if not result["compaction_get_bytes"] else
              f"Downloads: compaction read {fmt_bytes(result['compaction_get_bytes'])} of points; the fulls' checks after "
              f"their upload {fmt_bytes(result['full_check_bytes'])}; listings {fmt_bytes(result['listing_bytes'])}.", ""]
    idle = result["idle_source"]
    lines += [f"Idle minutes: the {59 - per_hour} scheduler runs an hour that only compare the fingerprint were not run; "
              f"they are estimated at {pct(cpu['idle_estimate_pct'])} of a core, the idle phase of the points section "
              f"above ({idle or 'not found'}: the long-running service itself and a fingerprint each minute). The "
              "minute-0 runs that merged nothing are not that cheap here: each is a process start, and the point before "
              "it was taken within 2 s of the batch's commit, so its fingerprint was racy and the minute-0 run read the "
              "store again (publishing nothing); in the service that read falls on the next minute's run instead.", ""]
    rst = result["restore"]
    lines += [f"Restores (`storebackup restore NAME DIR --from … --proof-key KEY`, the service's proof key as a restore "
              f"on its machine finds it; {result['runs']} interleaved rounds after a warm-up round; from S3 on loopback, "
              "not through the proxy, and from a local folder filled by `storebackup copy NAME` of each backup below "
              f"with its chain, {fmt_bytes(rst['local_copy_bytes'])} in {rst['copy_seconds']} s; each restored App.sqlite "
              "held the batch its backup was made after: bench_seq, count(*) and sum(amount) of items). The full's "
              "databases carry a proof, so its restore runs no integrity_check; points carry none, so a point's restore "
              "checks App.sqlite; \"full checked\" is the full restored with --check-databases, which does that check "
              "too. Links: the backups a restore reads (the backup and its bases).", ""]
    lines += restores_table(result) + [""]
    lines += [f"Run: commit {result['commit']}, {result['machine']}; the simulation took "
              f"{result['wall_simulation_s'] / 60:.1f} min of wall time "
              f"({result['wall_simulation_s'] / (24 * result['days_run']):.1f} s a simulated hour), everything "
              f"{result['wall_total_s'] / 60:.1f} min; load average (1, 5, 15 min) "
              f"{', '.join(map(str, result['load_at_start']))} at the start, "
              f"{', '.join(map(str, result['load_after_week']))} after the simulation, "
              f"{', '.join(map(str, result['load_at_end']))} at the end (a shared machine: another engineer's builds and "
              "tests ran meanwhile; the Load column is the 1-minute load at each day's end).", ""]
    return "\n".join(lines)


# ------------------------------------------------------------------ main


def bucket_objects(root):
    """Files under the destination's prefix in the S3 server's folder (every object it holds)."""
    count = 0
    for folder, _, names in os.walk(root):
        if os.path.basename(folder) == PREFIX and os.path.basename(os.path.dirname(folder)) == BUCKET:
            count += len(names)
    return count


def measure(args, root, work):
    store = os.path.join(work, "Stores")
    home = os.path.join(work, "home")
    os.makedirs(home, exist_ok=True)
    log("levels: preparing the store")
    reset_store(args.pristine, store)
    server = start_s3(root, BUCKET)
    proxy = Proxy(start_proxy(root, server))
    credentials = write_credentials(server, os.path.join(work, "s3.credentials"))
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    env["HOME"] = home
    config = os.path.join(work, "storebackup.yml")
    write_config(config, work, store, credentials, proxy.url)
    load_start = os.getloadavg()
    repo = os.path.dirname(os.path.dirname(HERE))
    commit = subprocess.run(["git", "-C", repo, "rev-parse", "--short", "HEAD"], stdout=subprocess.PIPE).stdout.decode().strip()
    with open("/proc/cpuinfo") as f:
        cpu = next((line.split(":", 1)[1].strip() for line in f if line.startswith("model name")), "unknown CPU")
    wall_start = time.time()
    runs, batches, days, initial, start, page_size = simulate(args, work, store, env, config)
    simulated_wall = time.time() - wall_start
    load_after_week = os.getloadavg()

    entries = proxy.entries()
    per_run, strays = assign_requests(entries, runs)
    for run, mine in zip(runs, per_run):
        run["requests"] = by_method(mine)
    backups = list_backups(args.bin, env, server["endpoint"], credentials, f"s3://{BUCKET}/{PREFIX}")
    levels_text = subprocess.run([args.bin, "list", "--from", f"s3://{BUCKET}/{PREFIX}", "--s3-endpoint", server["endpoint"],
                                  "--credentials", credentials, "--levels"], env=env, stdout=subprocess.PIPE,
                                 check=True).stdout.decode(errors="replace")
    figures = day_figures(runs, per_run, days)
    idle_pct, idle_source = idle_cpu_from_points_section(args.benchmarks)
    everything = [e for mine in per_run for e in mine]
    closes = [e for run, mine in zip(runs, per_run) if run["kind"] == "close" for e in mine]
    result = {
        "days_run": args.days, "points_per_hour": args.points_per_hour, "runs": args.runs, "commit": commit,
        "machine": f"{cpu}, {len(os.sched_getaffinity(0))} cores", "store_mib": bench.tree_size(args.pristine) / MiB,
        "page_size": page_size, "simulated_start": iso(start), "simulated_start_unix": start,
        "wall_simulation_s": round(simulated_wall, 1), "load_at_start": [round(x, 2) for x in load_start],
        "load_after_week": [round(x, 2) for x in load_after_week],
        "objects": object_figures(backups, args.days, args.points_per_hour, bucket_objects(root)), "list_levels_tail": levels_text.strip().splitlines()[-5:],
        "days": figures, "requests": len(everything), "requests_by_method": by_method(everything),
        "stray_requests": len(strays), "up_bytes": up_bytes(everything), "up_bytes_not_fulls": up_bytes(everything, fulls=False),
        "down_bytes": sum(e.get("down_bytes", 0) for e in everything),
        "compaction_get_bytes": get_bytes(closes, "points"), "full_check_bytes": get_bytes(everything, "fulls"),
        "object_get_bytes": get_bytes(everything, "points") + get_bytes(everything, "fulls"),
        "listing_bytes": get_bytes(everything, "listings"), "by_run": class_figures(runs, per_run),
        "wall_runs_s": round(sum(r["wall_s"] for r in runs), 1),
        "cpu": cpu_figures(runs, args.days * DAY, idle_pct), "idle_source": idle_source,
        "local_copies_max_bytes": max((d["local_copies_bytes"] for d in days), default=None),
        "fulls": sorted(n for r in runs for n in r["backed_up"] if is_full(n)),
        "links": {b["name"]: chain_links(backups, b["name"]) for b in backups},
        "backups": [{"name": b["name"], "kind": b["kind"], "level": b.get("level"), "size": b.get("size")} for b in backups],
        "run_log": [{k: r[k] for k in ("kind", "hour", "now", "wall_s", "cpu_s", "max_rss_kib", "backed_up", "merged",
                                       "deleted", "requests")} for r in runs],
    }
    log(f"levels: simulation done in {simulated_wall / 60:.1f} min; {len(backups)} backups; restores next")
    result["restore"] = restore_phase(args, env, server, credentials, backups, start, batches, initial, args.days)
    result["batches"] = len(batches)
    result["load_at_end"] = [round(x, 2) for x in os.getloadavg()]
    result["wall_total_s"] = round(time.time() - wall_start, 1)
    return result


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--work")
    parser.add_argument("--pristine")
    parser.add_argument("--bin")
    parser.add_argument("--days", type=int, default=7, help="simulated days (default 7)")
    parser.add_argument("--points-per-hour", type=int, default=1,
                        help="batches and points an hour, from minute 10 on (default 1: at minute 10)")
    parser.add_argument("--runs", type=int, default=3, help="rounds of the restores")
    parser.add_argument("--benchmarks", default=os.path.join(os.path.dirname(os.path.dirname(HERE)), "BENCHMARKS.md"),
                        help="the file whose points section gives the idle CPU (default: the repository's)")
    parser.add_argument("--out")
    parser.add_argument("--json")
    parser.add_argument("--keep", action="store_true", help="keep the work folder (runs.log, the store, the state)")
    parser.add_argument("--report", metavar="JSON", help="only print the Markdown section of a JSON result")
    args = parser.parse_args()
    if args.report:
        with open(args.report) as f:
            print(report(json.load(f)))
        return
    if not (args.work and args.pristine and args.bin):
        parser.error("--work, --pristine and --bin are required")
    if args.days < 1:
        parser.error("--days must be at least 1")
    if not 1 <= args.points_per_hour <= 50:
        parser.error("--points-per-hour must be 1-50")
    args.bin = os.path.abspath(args.bin)
    args.work = work = os.path.join(os.path.abspath(args.work), "levels")
    bench.ARGS = args
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    bench.run_and_report(args, work, "levels", measure, report)
    if not args.keep:
        remove(work)


if __name__ == "__main__":
    main()
