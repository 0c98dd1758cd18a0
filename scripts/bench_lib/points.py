#!/usr/bin/env python3
"""Restore to any minute: the scheduler's points on S3 (issue 52's targets).

    scripts/bench --points [--large | --store-from DIR] [--minutes N] [--runs N]
                  [--max-chain N] [--bin PATH] [--out FILE]
    python3 points.py --work DIR --pristine STORE --bin STOREBACKUP [--minutes 30] [--runs N]
                      [--max-chain N] [--out FILE] [--json FILE]

    scripts/bench --points --minutes 3                 # a quick try on the 250 MiB store
    scripts/bench --points --large --out R.md          # the targets' 30-minute run, 2 GiB store
    scripts/bench --points --large --store-from DIR    # the same on an existing copy of that store

`storebackup run` (the scheduler service) backs up a copy of the store with one job
(`schedule: every 1m`, `incremental: true`) to S3 (rclone serve s3 on loopback) through the
fault proxy without faults, which logs every request (method, bytes each way, start and end
times). The credentials are in a chmod-600 file named by the configuration. Once the first
full is published and the service is quiet, a writer (writer.py --update-random --seq-table
bench_seq, synchronous=FULL) updates one random row 20 times a second for a third of
--minutes (default 30: 10 minutes), is idle for a third, and writes again for the last third;
each commit also advances bench_seq.seq, and the writer logs (seq, acknowledged time,
latency, row). Then the run waits for the point holding the last commit.

Measured from outside the service:
- CPU: utime + stime of the service and its children (/proc/PID/stat), over the run (the
  writer's start to the publication of the point holding its last commit) and per phase;
  the first full and its check come before and are left out;
- peak RSS: the service's VmHWM;
- requests: the proxy's log, cut into bursts (a run of the service); a burst that uploads a
  full is a full's, one that uploads an incremental a point's; requests per point = the
  requests of the bursts that are not a full's / the points; idle = the bursts that start in
  the idle third, less the first point after the writer stopped;
- bytes uploaded by the points' bursts against the bytes of the distinct changed pages:
  each point's commits (bench_seq of the point before it to its own) name the rows they
  updated; a row's page is estimated as (id - 1) // (rows per page of items, from dbstat),
  one more page per point for bench_seq; pages x page size;
- bytes downloaded by the service against bytes it uploaded (in the run);
- recovery point: for each acknowledged commit, the time from its acknowledgement to the end
  of the upload (PUT, or the multipart upload's completing POST, at the proxy) of the first
  point whose App.sqlite holds its seq (`storebackup sql POINT App.sqlite "SELECT seq FROM
  bench_seq"` of every backup); p50, p99, max;
- the writer's longest commit;
- restore of the point restore --at would pick for a few whole minutes of the run (about 1/4,
  1/2, 3/4 and the end of it; `restore --at` when the binary has it, else the point chosen by
  the times `list --json` gives, by name) against
  `restore` of the chain's full (the same store), from S3 directly, in interleaved rounds;
  the ratio is the median of the per-round, per-moment ratios; each restored App.sqlite must
  hold the point's seq;
- per-day figures: the run's figures x (1440 / --minutes), i.e. x 48 for the 30-minute run.

Writes a JSON result file (--json; default with --out FILE: FILE less its extension, plus
-points.json) and a Markdown section (printed, and appended to --out). Everything it starts (S3 server, proxy, service, writer) is stopped
on the way out, also on SIGTERM and Ctrl-C. Standard library only.
"""
import argparse
import bisect
import datetime
import json
import os
import signal
import sqlite3
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import bench  # noqa: E402
from bench import Tool, fmt_mib, fmt_s, log, percentile, remove, reset_store, run_rounds, verdict  # noqa: E402
import s3server  # noqa: E402
from s3server import Proxy, by_method, method, start_proxy, start_s3, write_credentials  # noqa: E402
from writer import start_seq  # noqa: E402

MiB = 1 << 20
BUCKET, PREFIX = "bench", "points"
SEQ_TABLE = "bench_seq"
COMMIT_INTERVAL_MS = 50  # 20 commits/s
BURST_GAP_S = 20  # requests further apart than this belong to different runs of the service
QUIET_S = 10
FIRST_FULL_TIMEOUT_S = 40 * 60
TAIL_TIMEOUT_S = 240
TARGETS = {"recovery_p99_s": 75, "cpu_pct": 2.0, "requests_per_point": 2, "upload_vs_pages": 2.0,
           "download_share": 0.01, "restore_ratio": 1.3, "rss_mib": 64, "commit_max_ms": 100}


# ------------------------------------------------------------------ the service, measured from outside


def proc_cpu_seconds(pid):
    """utime + stime of pid, its waited-for children (cutime + cstime) and its live descendants."""
    tick = os.sysconf("SC_CLK_TCK")
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    total = sum(int(x) for x in fields[11:15]) / tick
    for child in live_children(pid):
        try:
            total += proc_cpu_seconds(child)
        except OSError:
            pass
    return total


def live_children(pid):
    children = []
    try:
        for task in os.listdir(f"/proc/{pid}/task"):
            with open(f"/proc/{pid}/task/{task}/children") as f:
                children += [int(c) for c in f.read().split()]
    except OSError:
        pass
    return children


def peak_rss_kib(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
    return None


def write_config(path, work, store, credentials, endpoint, max_chain):
    lines = [f'state-directory: "{work}/state"', f'credentials: "{credentials}"', f's3-endpoint: "{endpoint}"',
             f'proof-key: "{work}/proof.key"', "stores:", "  - name: bench", f'    path: "{store}"',
             f'    destination: "s3://{BUCKET}/{PREFIX}"', "    schedule: every 1m", "    incremental: true"]
    if max_chain:
        lines.append(f"    max-chain: {max_chain}")
    with open(path, "w") as f:
        f.write("\n".join(lines) + "\n")


class Service:
    """`storebackup run --config FILE` in a session of its own, its log in a file."""

    def __init__(self, sb, config, env, log_path):
        self.log_file = open(log_path, "w")
        self.proc = subprocess.Popen([sb, "run", "--config", config], env=env, stdin=subprocess.DEVNULL,
                                     stdout=self.log_file, stderr=subprocess.STDOUT, start_new_session=True)
        self.pid = self.proc.pid

    def cpu(self):
        if self.proc.poll() is not None:
            raise RuntimeError(f"storebackup run exited with status {self.proc.returncode}")
        return proc_cpu_seconds(self.pid)

    def stop(self):
        if self.proc.poll() is None:
            os.killpg(self.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                os.killpg(self.pid, signal.SIGKILL)
                self.proc.wait()
        self.log_file.close()


def object_key(entry):
    """The backup's name an S3 request is about ('' for a listing or the bucket)."""
    return s3server.object_key(entry, BUCKET, PREFIX)


def uploads(entries):
    """{backup name: the end time of its upload} from PUTs and multipart-completing POSTs."""
    done = {}
    for entry in entries:
        key = object_key(entry)
        if key.endswith(".zip") and method(entry) in ("PUT", "POST") and entry.get("status", 200) < 300:
            done[key] = max(done.get(key, 0), entry["time"])
    return done


def wait_until(condition, timeout, what, service, step=2.0):
    deadline = time.monotonic() + timeout
    while not condition():
        service.cpu()  # fails at once if the service died
        if time.monotonic() > deadline:
            raise RuntimeError(f"timed out after {timeout:.0f} s waiting for {what}")
        time.sleep(step)


def wait_quiet(service, proxy):
    """Until the proxy saw no request and the service used no CPU for QUIET_S seconds."""
    last = (len(proxy.entries()), service.cpu())
    quiet_since = time.monotonic()
    while time.monotonic() - quiet_since < QUIET_S:
        time.sleep(1)
        now = (len(proxy.entries()), service.cpu())
        if now[0] != last[0] or now[1] - last[1] > 0.05:
            quiet_since = time.monotonic()
        last = now


# ------------------------------------------------------------------ the writer


def prepare_store(pristine, store):
    """The working copy, with the one-row sequence table; returns (page size, rows per page of items)."""
    reset_store(pristine, store)
    db = sqlite3.connect(os.path.join(store, "App.sqlite"), isolation_level=None)
    db.execute("PRAGMA journal_mode=WAL")
    start_seq(db, SEQ_TABLE)
    page_size = db.execute("PRAGMA page_size").fetchone()[0]
    (max_id,) = db.execute("SELECT max(id) FROM items").fetchone()
    try:
        (pages,) = db.execute("SELECT pageno FROM dbstat('main', 1) WHERE name = 'items'").fetchone()
    except sqlite3.Error:
        pages = db.execute("PRAGMA page_count").fetchone()[0]  # no dbstat: the whole file, an upper bound
    db.close()
    os.sync()
    return page_size, max_id / max(pages, 1)


def run_writer(store, out, seconds):
    """writer.py at 20 commits/s, synchronous=FULL, for seconds; returns its log."""
    argv = [sys.executable, os.path.join(HERE, "writer.py"), os.path.join(store, "App.sqlite"), "--out", out,
            "--interval-ms", str(COMMIT_INTERVAL_MS), "--duration", str(seconds), "--synchronous", "FULL",
            "--update-random", "--seq-table", SEQ_TABLE]
    proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL)
    try:
        if proc.wait(timeout=seconds + 120) != 0:
            raise RuntimeError(f"the writer failed with exit status {proc.returncode}")
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    with open(out) as f:
        return json.load(f)


# ------------------------------------------------------------------ the run


def timed_phases(args, service, proxy, store):
    """Runs active, idle, active and the tail; returns (marks {name: (unix, cpu)}, writer logs)."""
    third = args.minutes * 60 / 3
    marks = {"start": (time.time(), service.cpu())}
    logs = []
    for index, name in enumerate(("active", "idle", "active again")):
        log(f"points: {name} for {third:.0f} s")
        if name == "idle":
            time.sleep(third)
        else:
            logs.append(run_writer(store, os.path.join(args.work, f"writer-{index}.json"), third))
        marks[name] = (time.time(), service.cpu())
    ended = marks["active again"][0]
    log("points: waiting for the point that holds the last commit")
    wait_until(lambda: any(e["time"] > ended and e.get("started", 0) > ended for e in proxy.entries()
                           if method(e) in ("PUT", "POST") and object_key(e).endswith(".zip")),
               TAIL_TIMEOUT_S, "a point after the writer stopped", service)
    wait_quiet(service, proxy)
    marks["tail"] = (time.time(), service.cpu())
    return marks, logs


def list_backups(sb, env, endpoint, credentials, destination=f"s3://{BUCKET}/{PREFIX}"):
    """`list --json` of the destination (default: this bench's)."""
    out = subprocess.run([sb, "list", "--from", destination, "--s3-endpoint", endpoint,
                          "--credentials", credentials, "--json"], env=env, check=True, stdout=subprocess.PIPE)
    return json.loads(out.stdout)


def seq_in(sb, env, endpoint, credentials, name):
    out = subprocess.run([sb, "sql", name, "App.sqlite", f"SELECT seq FROM {SEQ_TABLE}", "--from",
                          f"s3://{BUCKET}/{PREFIX}", "--s3-endpoint", endpoint, "--credentials", credentials, "--json"],
                         env=env, check=True, stdout=subprocess.PIPE)
    return int(json.loads(out.stdout)[0]["rows"][0][0])


def bursts(entries):
    """The proxy's requests cut into runs of the service: lists of entries, by start time."""
    groups = []
    for entry in sorted(entries, key=lambda e: e.get("started", e["time"])):
        if groups and entry.get("started", entry["time"]) - max(e["time"] for e in groups[-1]) <= BURST_GAP_S:
            groups[-1].append(entry)
        else:
            groups.append([entry])
    return groups


def burst_kind(burst, kinds):
    uploaded = {object_key(e) for e in burst if method(e) in ("PUT", "POST")}
    found = [kinds.get(name) for name in uploaded if name in kinds]
    return "full" if "full" in found else "point" if "incremental" in found else "none"


# ------------------------------------------------------------------ figures


def recovery_delays(acks, points):
    """Seconds from each commit's acknowledgement to the first published point holding it
    (None when none did). points: [(published, seq)]."""
    ordered = sorted(points)
    times, best = [], []
    for published, seq in ordered:
        times.append(published)
        best.append(max(seq, best[-1] if best else 0))
    delays = []
    for seq, acked, _, _ in acks:
        index = bisect.bisect_left(best, seq)
        delays.append(times[index] - acked if index < len(best) else None)
    return delays


def changed_page_bytes(acks, point_seqs, page_size, rows_per_page):
    """Bytes of the distinct pages each point's commits changed (estimated from the rows)."""
    row_of = {seq: row for seq, _, _, row in acks}
    total, previous = 0, 0
    for seq in sorted(point_seqs):
        rows = {row_of[s] for s in range(previous + 1, seq + 1) if s in row_of}
        if seq > previous:
            total += (len({int((row - 1) // rows_per_page) for row in rows}) + 1) * page_size
        previous = max(previous, seq)
    return total


def cpu_figures(marks):
    names = ["start", "active", "idle", "active again", "tail"]
    phases = {}
    for before, after in zip(names, names[1:]):
        seconds = marks[after][0] - marks[before][0]
        cpu = marks[after][1] - marks[before][1]
        phases[after] = {"seconds": round(seconds, 1), "cpu_seconds": round(cpu, 2),
                         "cpu_pct": round(100 * cpu / seconds, 3) if seconds else None}
    seconds = marks["tail"][0] - marks["start"][0]
    cpu = marks["tail"][1] - marks["start"][1]
    return {"run": {"seconds": round(seconds, 1), "cpu_seconds": round(cpu, 2),
                    "cpu_pct": round(100 * cpu / seconds, 3)}, "phases": phases}


def request_figures(entries, kinds, marks):
    """Requests and bytes of the run (bursts that start after the writer's start)."""
    start, idle_from, idle_to = marks["start"][0], marks["active"][0], marks["idle"][0]
    runs = [b for b in bursts(entries) if b[0].get("started", b[0]["time"]) >= start]
    points = [b for b in runs if burst_kind(b, kinds) == "point"]
    not_fulls = [b for b in runs if burst_kind(b, kinds) != "full"]
    flat = [e for b in not_fulls for e in b]
    everything = [e for b in runs for e in b]
    idle_runs = [b for b in runs if idle_from <= b[0].get("started", b[0]["time"]) < idle_to]
    first_point = next((b for b in idle_runs if burst_kind(b, kinds) == "point"), None)
    idle_rest = [b for b in idle_runs if b is not first_point]
    per_point = [len(b) for b in points]
    return {
        "runs_with_requests": len(runs), "points": len(points),
        "fulls": sum(burst_kind(b, kinds) == "full" for b in runs),
        "requests_not_fulls": len(flat), "requests_by_method_not_fulls": by_method(flat),
        "requests_per_point": round(len(flat) / len(points), 2) if points else None,
        "requests_per_point_median": statistics.median(per_point) if per_point else None,
        "requests_per_point_max": max(per_point) if per_point else None,
        "point_requests": [by_method(b) for b in points],
        "point_up_bytes": [sum(e.get("up_bytes", 0) for e in b) for b in points],
        "point_down_bytes": [sum(e.get("down_bytes", 0) for e in b) for b in points],
        "up_bytes_not_fulls": sum(e.get("up_bytes", 0) for e in flat),
        "down_bytes_not_fulls": sum(e.get("down_bytes", 0) for e in flat),
        "up_bytes": sum(e.get("up_bytes", 0) for e in everything),
        "down_bytes": sum(e.get("down_bytes", 0) for e in everything),
        "idle_points_after_first": sum(burst_kind(b, kinds) == "point" for b in idle_rest),
        "idle_requests_after_first": sum(len(b) for b in idle_rest),
        "idle_first_point_requests": len(first_point) if first_point else 0,
    }


# ------------------------------------------------------------------ restores


def chosen_moments(marks, minutes):
    """Whole minutes of the run (from the writer's start): about 1/4, 1/2, 3/4 and the end."""
    picked = sorted({max(1, round(minutes * f)) for f in (0.25, 0.5, 0.75, 1.0)})
    return [min(marks["start"][0] + 60 * m, marks["active again"][0]) for m in picked]


def name_time(backup):
    """The backup's time (its name's, whole seconds, UTC), as `list --json` gives it."""
    return datetime.datetime.strptime(backup["date"], "%Y-%m-%dT%H:%M:%SZ").replace(
        tzinfo=datetime.timezone.utc).timestamp()


def point_at(backups, moment):
    """The newest backup made at or before moment: what restore --at picks. A moment within 2 s
    of a backup's time is moved 3 s past it, so that the name's rounding cannot change the pick."""
    for backup in backups:
        if abs(name_time(backup) - moment) < 2:
            moment = name_time(backup) + 3
    eligible = [b for b in backups if name_time(b) <= moment]
    return (max(eligible, key=name_time) if eligible else None), moment


def iso_utc(moment):
    return datetime.datetime.fromtimestamp(moment, datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def restore_phase(args, env, endpoint, credentials, backups, seqs, marks):
    """Interleaved rounds: restore of the full against restore of each chosen moment's point."""
    sb = args.bin
    has_at = "--at" in subprocess.run([sb, "restore", "--help"], stdout=subprocess.PIPE, env=env).stdout.decode()
    full = min((b for b in backups if b["kind"] == "full"), key=name_time)
    target = os.path.join(args.work, "restore-out", "Stores")
    source = ["--from", f"s3://{BUCKET}/{PREFIX}", "--s3-endpoint", endpoint, "--credentials", credentials,
              "--yes", "--no-keep"]

    clean = bench.restore_target_cleaner(target)

    def holds(*wanted):
        def check(_, __):
            try:
                db = sqlite3.connect(f"file:{os.path.join(target, 'App.sqlite')}?mode=ro", uri=True)
                (found,) = db.execute(f"SELECT seq FROM {SEQ_TABLE}").fetchone()
                db.close()
            except sqlite3.Error as error:
                return f"restored App.sqlite unreadable: {error}"
            return None if found in wanted else f"restored seq {found}, expected {' or '.join(map(str, wanted))}"
        return check

    tools = [Tool("full", "restore", f"restore of the chain's full ({full['name']})",
                  lambda _: [sb, "restore", full["name"], target, *source], prepare=clean, check=holds(0), env=env)]
    chosen = []
    for index, moment in enumerate(chosen_moments(marks, args.minutes)):
        point, moment = point_at(backups, moment)
        if point is None:
            continue
        minute = (moment - marks["start"][0]) / 60
        if has_at:
            argv = lambda _, m=moment: [sb, "restore", "--at", iso_utc(m), target, *source]  # noqa: E731
        else:
            argv = lambda _, p=point: [sb, "restore", p["name"], target, *source]  # noqa: E731
        chosen.append({"minute": round(minute, 2), "at": iso_utc(moment), "point": point["name"],
                       "kind": point["kind"], "seq": seqs[point["name"]], "key": f"at{index}"})
        # --at goes by the manifest's time, which the name's may trail by a few seconds.
        close = [seqs[b["name"]] for b in backups if has_at and moment < name_time(b) <= moment + 5]
        tools.append(Tool(f"at{index}", "restore", f"restore {'--at ' if has_at else ''}minute {minute:.1f}",
                          argv, prepare=clean, check=holds(seqs[point["name"]], *close), env=env))
    run_rounds(tools, args.runs, "points: restores")
    clean(0)
    bench.discard_set_aside()
    ratios = []
    for tool in tools[1:]:
        for r, seconds in tool.by_round.items():
            if r in tools[0].by_round:
                ratios.append(seconds / tools[0].by_round[r])
    for entry in chosen:
        tool = next(t for t in tools if t.key == entry["key"])
        entry["median_s"] = tool.median
    return {"by_at": has_at, "full": full["name"], "full_median_s": tools[0].median, "chosen": chosen,
            "ratios": [round(r, 3) for r in ratios], "ratio_median": statistics.median(ratios) if ratios else None,
            "failures": [f for t in tools for f in t.failures]}


# ------------------------------------------------------------------ report


def fmt_pct(share):
    return "n/a" if share is None else f"{100 * share:.2f} %"


def fmt_bytes(n):
    if n is None:
        return "n/a"
    return f"{n / 1e9:.2f} GB" if n >= 1e9 else f"{n / 1e6:.2f} MB" if n >= 1e5 else f"{n / 1e3:.1f} kB"


def targets_table(result):
    rec, cpu, req, rst = result["recovery"], result["cpu"], result["requests"], result["restore"]
    t = TARGETS
    idle_ok = req["idle_points_after_first"] == 0 and req["idle_requests_after_first"] == 0
    upload_ratio = result["upload_vs_changed_pages"]
    down_share = req["down_bytes"] / req["up_bytes"] if req["up_bytes"] else None
    down_share_points = req["down_bytes_not_fulls"] / req["up_bytes_not_fulls"] if req["up_bytes_not_fulls"] else None
    rss = result["service_peak_rss_kib"]
    rows = [
        ("recovery point p99 (acknowledged commit to the end of the upload of the first point holding it)",
         f"p50 {rec['p50_s']} s, p99 {rec['p99_s']} s, max {rec['max_s']} s; {rec['missing']} of {rec['commits']} "
         f"commits in no point", f"≤ {t['recovery_p99_s']} s",
         verdict(None if rec["p99_s"] is None else rec["p99_s"], t["recovery_p99_s"]) if not rec["missing_over_1pct"]
         else "FAIL"),
        ("service CPU over the run (% of one core)", f"{cpu['run']['cpu_pct']:.2f} % ({cpu['run']['cpu_seconds']} s in "
         f"{cpu['run']['seconds'] / 60:.1f} min)", f"≤ {t['cpu_pct']} %", verdict(cpu["run"]["cpu_pct"], t["cpu_pct"])),
        ("idle stretch: no point, no request (after the first point once the writer stopped)",
         f"{req['idle_points_after_first']} points, {req['idle_requests_after_first']} requests", "0, 0",
         "PASS" if idle_ok else "FAIL"),
        ("requests per point (runs that made no full)", f"{req['requests_per_point']} (median {req['requests_per_point_median']}, "
         f"max {req['requests_per_point_max']}; {req['points']} points)", f"≤ {t['requests_per_point']}",
         verdict(req["requests_per_point"], t["requests_per_point"])),
        ("bytes uploaded (fulls excluded) / bytes of the distinct changed pages",
         f"{fmt_bytes(req['up_bytes_not_fulls'])} / {fmt_bytes(result['changed_page_bytes'])} = "
         f"{'n/a' if upload_ratio is None else f'{upload_ratio:.2f}×'}", f"≤ {t['upload_vs_pages']}×",
         verdict(upload_ratio, t["upload_vs_pages"])),
        ("bytes downloaded by the service / bytes it uploaded (in the run, fulls included)",
         f"{fmt_bytes(req['down_bytes'])} / {fmt_bytes(req['up_bytes'])} = {fmt_pct(down_share)}",
         f"≤ {100 * t['download_share']:.0f} %", verdict(down_share, t["download_share"])),
        ("the same for the runs that made no full",
         f"{fmt_bytes(req['down_bytes_not_fulls'])} / {fmt_bytes(req['up_bytes_not_fulls'])} = "
         f"{fmt_pct(down_share_points)}", f"≤ {100 * t['download_share']:.0f} %",
         verdict(down_share_points, t["download_share"])),
        ("restore of the point nearest a minute / restore of the full (median)",
         "n/a" if rst["ratio_median"] is None else f"{rst['ratio_median']:.2f}× (full {fmt_s(rst['full_median_s'])})",
         f"≤ {t['restore_ratio']}×", verdict(rst["ratio_median"], t["restore_ratio"])),
        ("peak RSS of the service (VmHWM)", fmt_mib(rss), f"≤ {t['rss_mib']} MiB",
         verdict(None if rss is None else rss / 1024, t["rss_mib"])),
        ("FULL-sync writer's longest commit", f"{result['writer']['max_ms']:.1f} ms", f"≤ {t['commit_max_ms']} ms",
         verdict(result["writer"]["max_ms"], t["commit_max_ms"])),
    ]
    lines = ["| Target | Measured | Limit | Result |", "|---|---|---|---|"]
    return lines + [f"| {a} | {b} | {c} | **{d}** |" for a, b, c, d in rows]


def phases_table(result):
    lines = ["| Phase | Length | Commits | Service CPU | CPU % of a core |", "|---|---:|---:|---:|---:|"]
    for name, phase in result["cpu"]["phases"].items():
        commits = result["writer"]["commits_by_phase"].get(name, 0)
        lines.append(f"| {name} | {phase['seconds'] / 60:.1f} min | {commits} | {phase['cpu_seconds']} s | "
                     f"{phase['cpu_pct']:.2f} % |")
    run = result["cpu"]["run"]
    lines.append(f"| whole run | {run['seconds'] / 60:.1f} min | {result['writer']['commits']} | {run['cpu_seconds']} s | "
                 f"{run['cpu_pct']:.2f} % |")
    return lines


def methods_table(req):
    """The requests of the runs that made no full, by method, in all and per point."""
    points = req["points"] or None
    lines = ["| Requests (runs without a full) | In the run | Per point |", "|---|---:|---:|"]
    for name, count in req["requests_by_method_not_fulls"].items():
        lines.append(f"| {name} | {count} | {count / points:.2f} |" if points else f"| {name} | {count} | n/a |")
    lines.append(f"| all | {req['requests_not_fulls']} | {req['requests_per_point'] or 'n/a'} |")
    return lines


def per_day_lines(result):
    factor = result["per_day_factor"]
    req = result["requests"]
    return [f"Per day: the run's figures × {factor:g} (1440 / {result['minutes']:g} minutes: a day taken as "
            f"{factor:g} copies of this run; for the 30-minute run, × 48):", "",
            f"- points: {req['points'] * factor:.0f}; fulls: {req['fulls'] * factor:.0f}",
            f"- requests (fulls excluded): {req['requests_not_fulls'] * factor:.0f}",
            f"- uploaded: {fmt_bytes(req['up_bytes'] * factor)} ({fmt_bytes(req['up_bytes_not_fulls'] * factor)} "
            "without fulls); downloaded: " + fmt_bytes(req["down_bytes"] * factor),
            f"- service CPU: {result['cpu']['run']['cpu_seconds'] * factor / 60:.1f} min"]


def report(result):
    req, rst = result["requests"], result["restore"]
    lines = [f"### Restore to any minute: points ({result['store_mib']:.0f} MiB store, {result['minutes']:g}-minute run)",
             "",
             f"`storebackup run` with one job (`schedule: every 1m`, `incremental: true`"
             f"{', `max-chain: ' + str(result['max_chain']) + '`' if result['max_chain'] else ''}) to S3 (rclone serve s3) "
             "through the fault proxy, which logged every request; a `synchronous=FULL` writer updated a random row "
             f"20 times a second for {result['minutes'] / 3:g} min, was idle for {result['minutes'] / 3:g} min, then wrote "
             f"again for {result['minutes'] / 3:g} min (`scripts/bench --points`, scripts/bench_lib/points.py). The first "
             f"full ({fmt_bytes(result['first_full']['bytes'])}, {result['first_full']['cpu_seconds']} s of CPU with its "
             "check) came before the run and is not counted.", ""]
    lines += targets_table(result) + [""] + phases_table(result) + [""]
    lines += methods_table(req) + [""]
    lines += [f"Fulls: {result['full_cadence']}. Changed pages are estimated from the rows "
              f"the writer updated: row id → page by the rows per page of `items` ({result['rows_per_page']:.1f}, "
              "from dbstat), plus bench_seq's page, per point.", ""]
    lines += [f"Restores ({'`restore --at TIME`' if rst['by_at'] else 'by name: this binary has no `restore --at`'}, "
              f"from S3 on loopback, {result['runs']} rounds):", "", "| Minute of the run | Point | Median |",
              "|---:|---|---:|"]
    lines += [f"| {c['minute']:.1f} | {c['kind']}, seq {c['seq']} | {fmt_s(c['median_s'])} |" for c in rst["chosen"]]
    lines += [f"| (the chain's full) | full | {fmt_s(rst['full_median_s'])} |", ""]
    lines += per_day_lines(result) + [""]
    return "\n".join(lines)


# ------------------------------------------------------------------ main


def observe_service(args, work, store, env, proxy, credentials):
    """Runs the service through the first full and the three phases; returns
    (first full's figures, phase marks, writer logs, peak RSS in KiB)."""
    config = os.path.join(work, "storebackup.yml")
    write_config(config, work, store, credentials, proxy.url, args.max_chain)
    service = Service(args.bin, config, env, os.path.join(work, "service.log"))
    try:
        log("points: storebackup run started; waiting for the first full")
        began = time.time()
        wait_until(lambda: uploads(proxy.entries()), FIRST_FULL_TIMEOUT_S, "the first full", service, step=5)
        wait_quiet(service, proxy)
        first = {"seconds": round(time.time() - began, 1), "cpu_seconds": round(service.cpu(), 2),
                 "bytes": sum(e.get("up_bytes", 0) for e in proxy.entries())}
        log(f"points: first full published ({first['bytes'] / MiB:.1f} MiB); the run starts")
        marks, writer_logs = timed_phases(args, service, proxy, store)
        return first, marks, writer_logs, peak_rss_kib(service.pid)
    finally:
        service.stop()


def writer_figures(writer_logs, marks):
    acks = [a for w in writer_logs for a in w["acks"]]
    latencies = [lat for w in writer_logs for _, lat in w["samples"]] + [e[1] for w in writer_logs for e in w["errors"]]
    return {"commits": len(acks), "errors": sum(len(w["errors"]) for w in writer_logs),
            "max_ms": round(1000 * max(latencies), 2) if latencies else None,
            "p99_ms": round(1000 * percentile(latencies, 99), 2) if latencies else None,
            "commits_by_phase": {"active": sum(1 for a in acks if a[1] <= marks["active"][0]),
                                 "active again": sum(1 for a in acks if a[1] > marks["active"][0])}}


def recovery_figures(acks, published, seqs):
    delays = recovery_delays(acks, [(published[n], seqs[n]) for n in published if n in seqs])
    found = [d for d in delays if d is not None]
    missing = len(delays) - len(found)
    return {"commits": len(delays), "missing": missing, "missing_over_1pct": missing > len(delays) / 100,
            "p50_s": round(percentile(found, 50), 1) if found else None,
            "p99_s": round(percentile(found, 99), 1) if found else None,
            "max_s": round(max(found), 1) if found else None}


def measure(args, root, work):
    store = os.path.join(work, "Stores")
    home = os.path.join(work, "home")
    os.makedirs(home, exist_ok=True)
    log("points: preparing the store")
    page_size, rows_per_page = prepare_store(args.pristine, store)
    server = start_s3(root, BUCKET)
    proxy = Proxy(start_proxy(root, server))
    credentials = write_credentials(server, os.path.join(work, "s3.credentials"))
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    env["HOME"] = home
    first, marks, writer_logs, rss = observe_service(args, work, store, env, proxy, credentials)

    log("points: reading every backup's seq")
    entries = proxy.entries()
    backups = list_backups(args.bin, env, server["endpoint"], credentials)
    published = uploads(entries)
    seqs = {b["name"]: seq_in(args.bin, env, server["endpoint"], credentials, b["name"]) for b in backups}
    kinds = {b["name"]: b["kind"] for b in backups}
    acks = [a for w in writer_logs for a in w["acks"]]
    in_run = [name for name in published if published[name] >= marks["start"][0]]
    requests = request_figures(entries, kinds, marks)
    changed = changed_page_bytes(acks, [seqs[n] for n in in_run if kinds.get(n) == "incremental"], page_size,
                                 rows_per_page)
    fulls_in_run = [n for n in in_run if kinds.get(n) == "full"]
    restore = restore_phase(args, env, server["endpoint"], credentials, backups, seqs, marks)
    with open(os.path.join(work, "service.log"), errors="replace") as f:
        service_log = bench.tail(f.read(), 20)
    return {
        "minutes": args.minutes, "per_day_factor": 1440 / args.minutes, "runs": args.runs,
        "max_chain": args.max_chain, "store_mib": bench.tree_size(args.pristine) / MiB,
        "page_size": page_size, "rows_per_page": rows_per_page, "first_full": first,
        "cpu": cpu_figures(marks), "service_peak_rss_kib": rss, "writer": writer_figures(writer_logs, marks),
        "recovery": recovery_figures(acks, published, seqs),
        "requests": requests, "changed_page_bytes": changed,
        "upload_vs_changed_pages": requests["up_bytes_not_fulls"] / changed if changed else None,
        "full_cadence": (f"{len(fulls_in_run)} in the run besides the first (max-chain "
                         f"{args.max_chain or '14, the default'}: a full after that many points)"),
        "backups": [{"name": b["name"], "kind": b["kind"], "date": b["date"], "size": b.get("size"),
                     "seq": seqs[b["name"]], "published": published.get(b["name"])} for b in backups],
        "restore": restore, "service_log_tail": service_log,
    }


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--work", required=True)
    parser.add_argument("--pristine", required=True)
    parser.add_argument("--bin", required=True)
    parser.add_argument("--minutes", type=float, default=30, help="the run's length: 3 equal phases (default 30)")
    parser.add_argument("--runs", type=int, default=3, help="rounds of the restores")
    parser.add_argument("--max-chain", type=int, help="the job's max-chain (default: storebackup's)")
    parser.add_argument("--out")
    parser.add_argument("--json")
    args = parser.parse_args()
    args.bin = os.path.abspath(args.bin)
    # Everything of this bench (and bench.py's set-aside and time -v files) under one folder.
    args.work = work = os.path.join(os.path.abspath(args.work), "points")
    bench.ARGS = args
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    bench.run_and_report(args, work, "points", measure, report)
    remove(work)


if __name__ == "__main__":
    main()
