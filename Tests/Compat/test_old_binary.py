"""Old binaries and new backups: storebackup 0.1.0 (commit 7d867db) does not check the
archive format, so every later format must be one that 0.1.0 refuses rather than misreads.

The 0.1.0 binary is built once from that commit (git archive, no checkout of this tree is
touched) into the gitignored .build-v0.1.0/ folder and reused by later runs. A backup made by
the current build is then given to it:
- while the current format is 1, 0.1.0 must restore it exactly as the current build does;
- once the format is newer, 0.1.0's restore and verify must fail, leave the target store as
  it was and leave nothing behind (no <store>_New, no journal, no temporary files).
Whatever the current format, an archive of format 1 with an extra `.storebackup/format-2`
entry (the marker later formats carry, docs/FORMAT.md) must be refused by 0.1.0.

Format 3 (fulls of a chain and incremental backups, written here by the independent writer
Tests/StoreBackupTests/Fixtures/make_incremental.py) must be refused by 0.1.0 and by the last
format-2 build (commit 66e93f1, cached in .build-v-format2/), which must say that the backup
"was made by a newer storebackup (format 3)": an incremental restored by a binary that does
not know chains would be a partial store.

STOREBACKUP_OLD_BINARY=PATH uses a 0.1.0 binary built elsewhere, STOREBACKUP_FORMAT2_BINARY=PATH
a format-2 one.
"""
import json
import os
import shutil
import sqlite3
import subprocess
import sys
import tempfile
import zipfile

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
OLD_COMMIT = "7d867db"
CACHE = os.path.join(ROOT, ".build-v0.1.0")
# The last commit whose build writes and reads format 2 only.
FORMAT2_COMMIT = "66e93f1"
FORMAT2_CACHE = os.path.join(ROOT, ".build-v-format2")
# Where old commits are built, one after another (see build_old_binary).
SHARED_BUILD = os.path.join(ROOT, ".build-old-commits")
MAKE_INCREMENTAL = os.path.join(ROOT, "Tests", "StoreBackupTests", "Fixtures", "make_incremental.py")
sys.path.insert(0, os.path.join(ROOT, "Tests", "StoreBackupTests", "Fixtures", "golden"))
import tree_listing  # noqa: E402


def run(args, **kwargs):
    kwargs.setdefault("capture_output", True)
    kwargs.setdefault("text", True)
    return subprocess.run(args, **kwargs)


def swift_environment():
    environment = dict(os.environ)
    environment["PATH"] = "/opt/swift/usr/bin:" + environment.get("PATH", "")
    return environment


@pytest.fixture(scope="module")
def old_binary():
    given = os.environ.get("STOREBACKUP_OLD_BINARY")
    if given:
        return given
    return build_old_binary(OLD_COMMIT, CACHE, "STOREBACKUP_OLD_BINARY")


@pytest.fixture(scope="module")
def format2_binary():
    given = os.environ.get("STOREBACKUP_FORMAT2_BINARY")
    if given:
        return given
    return build_old_binary(FORMAT2_COMMIT, FORMAT2_CACHE, "STOREBACKUP_FORMAT2_BINARY")


def build_old_binary(old_commit, cache, variable):
    """The storebackup binary of `old_commit`, built once into `cache` (gitignored) and reused."""
    binary = os.path.join(cache, "storebackup")
    stamp = os.path.join(cache, "commit")
    full = run(["git", "-C", ROOT, "rev-parse", "--verify", old_commit + "^{commit}"])
    assert full.returncode == 0, (
        "commit %s is not in this clone's history; fetch it (git fetch --unshallow) "
        "or set %s: %s" % (old_commit, variable, full.stderr))
    commit = full.stdout.strip()
    if os.path.isfile(binary) and os.path.isfile(stamp) and open(stamp).read().strip() == commit:
        return binary
    # One source folder and one scratch folder for every old commit, at a fixed place: SwiftPM
    # builds the dependencies once for all of them and recompiles only the package's own files.
    source = os.path.join(SHARED_BUILD, "src")
    scratch = os.path.join(SHARED_BUILD, "build")
    os.makedirs(cache, exist_ok=True)
    shutil.rmtree(source, ignore_errors=True)
    os.makedirs(source)
    archive = subprocess.Popen(["git", "-C", ROOT, "archive", commit], stdout=subprocess.PIPE)
    unpacked = run(["tar", "-x", "-C", source], stdin=archive.stdout)
    assert archive.wait() == 0 and unpacked.returncode == 0, unpacked.stderr
    # The same dependency versions as this tree, when it has resolved them.
    resolved = os.path.join(ROOT, "Package.resolved")
    if os.path.isfile(resolved):
        shutil.copy(resolved, os.path.join(source, "Package.resolved"))
    built = run(["swift", "build", "--package-path", source, "--scratch-path", scratch, "--product", "storebackup"],
                env=swift_environment())
    assert built.returncode == 0, "building %s failed:\n" % old_commit + (built.stdout + built.stderr)[-4000:]
    bin_path = run(["swift", "build", "--package-path", source, "--scratch-path", scratch, "--show-bin-path"],
                   env=swift_environment()).stdout.strip()
    shutil.copy(os.path.join(bin_path, "storebackup"), binary + ".tmp")
    os.rename(binary + ".tmp", binary)
    with open(stamp, "w") as handle:
        handle.write(commit + "\n")
    version = run([binary, "--version"])
    assert version.stdout.strip() == "0.1.0", version.stdout + version.stderr
    return binary


@pytest.fixture(scope="module")
def current_binary():
    given = os.environ.get("STOREBACKUP_BINARY")
    if given:
        return given
    built = run(["swift", "build", "--product", "storebackup"], cwd=ROOT, env=swift_environment())
    assert built.returncode == 0, (built.stdout + built.stderr)[-4000:]
    bin_path = run(["swift", "build", "--show-bin-path"], cwd=ROOT, env=swift_environment()).stdout.strip()
    return os.path.join(bin_path, "storebackup")


@pytest.fixture
def work():
    folder = tempfile.mkdtemp(prefix="storebackup-compat-")
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


def make_store(root):
    os.makedirs(os.path.join(root, "Documents"))
    connection = sqlite3.connect(os.path.join(root, "App.sqlite"))
    connection.execute("PRAGMA journal_mode=wal")
    connection.execute("CREATE TABLE t(id INTEGER PRIMARY KEY, v TEXT)")
    connection.executemany("INSERT INTO t(v) VALUES (?)", [("row %d" % i,) for i in range(200)])
    connection.commit()
    connection.close()
    with open(os.path.join(root, "Documents", "note.txt"), "w") as handle:
        handle.write("hello\n")
    os.chmod(os.path.join(root, "Documents", "note.txt"), 0o600)
    os.symlink("Documents/note.txt", os.path.join(root, "note-link"))
    os.utime(os.path.join(root, "Documents", "note.txt"), (1_600_000_001, 1_600_000_001))


def create(binary, work):
    store = os.path.join(work, "Source", "Stores")
    os.makedirs(os.path.dirname(store))
    make_store(store)
    backups = os.path.join(work, "backups")
    made = run([binary, "create", store, "--to", backups])
    assert made.returncode == 0, made.stderr
    name = made.stdout.strip().splitlines()[-1]
    return backups, name


def archive_format(path):
    with zipfile.ZipFile(path) as archive:
        return json.loads(archive.read(".storebackup/manifest.json"))["format"]


def folder_names(path):
    """What is in a folder, but the store's lock file (it stays, by design, once made)."""
    return sorted(name for name in os.listdir(path) if not name.endswith(".storebackup-lock"))


def assert_refused_without_trace(old_binary, backups, name, work):
    """0.1.0's restore onto an existing store and its verify both fail and change nothing."""
    parent = os.path.join(work, "Target")
    store = os.path.join(parent, "Stores")
    os.makedirs(parent)
    make_store(store)
    before = tree_listing.listing(store)
    names_before = folder_names(parent)
    backups_before = folder_names(backups)
    temporary = os.path.join(work, "tmp")
    os.makedirs(temporary)
    environment = dict(os.environ, TMPDIR=temporary)
    restored = run([old_binary, "restore", name, store, "--from", backups, "--yes"], env=environment)
    assert restored.returncode != 0, "0.1.0 restored a newer backup:\n" + restored.stdout + restored.stderr
    assert tree_listing.listing(store) == before, "0.1.0's refused restore changed the store"
    assert folder_names(parent) == names_before, "0.1.0 left something beside the store"
    verified = run([old_binary, "verify", name, "--from", backups], env=environment)
    assert verified.returncode != 0, "0.1.0 verified a newer backup as good:\n" + verified.stdout
    assert os.listdir(temporary) == [], "0.1.0's verify left temporary files"
    assert folder_names(backups) == backups_before, "0.1.0 changed the backups folder"
    return restored.stderr + verified.stdout + verified.stderr


def test_old_binary_restores_or_refuses_the_current_format(old_binary, current_binary, work):
    backups, name = create(current_binary, work)
    format_number = archive_format(os.path.join(backups, name))
    if format_number > 1:
        assert_refused_without_trace(old_binary, backups, name, work)
        return
    # Still format 1: 0.1.0 must give back exactly what the current build gives back.
    old_target = os.path.join(work, "Old", "Stores")
    new_target = os.path.join(work, "New", "Stores")
    for binary, target in ((old_binary, old_target), (current_binary, new_target)):
        restored = run([binary, "restore", name, target, "--from", backups, "--yes"])
        assert restored.returncode == 0, binary + ": " + restored.stderr
    assert tree_listing.listing(old_target) == tree_listing.listing(new_target)
    verified = run([old_binary, "verify", name, "--from", backups])
    assert verified.returncode == 0, verified.stdout + verified.stderr


def test_old_binary_refuses_format_4(old_binary, current_binary, work):
    """A store with a database over 1 MiB makes a format-4 archive (block hashes), which
    0.1.0 refuses by its marker like any newer format."""
    store = os.path.join(work, "Big", "Stores")
    os.makedirs(store)
    connection = sqlite3.connect(os.path.join(store, "App.sqlite"))
    connection.execute("CREATE TABLE t(id INTEGER PRIMARY KEY, v TEXT)")
    connection.executemany("INSERT INTO t(v) VALUES (?)", [("row %d " % i * 8,) for i in range(40000)])
    connection.commit()
    connection.close()
    backups = os.path.join(work, "big-backups")
    made = run([current_binary, "create", store, "--to", backups])
    assert made.returncode == 0, made.stderr
    name = made.stdout.strip().splitlines()[-1]
    assert archive_format(os.path.join(backups, name)) == 4
    with zipfile.ZipFile(os.path.join(backups, name)) as archive:
        assert ".storebackup/format-4" in archive.namelist()
    assert_refused_without_trace(old_binary, backups, name, work)


def test_old_binary_refuses_an_archive_marked_as_format_2(old_binary, current_binary, work):
    backups, name = create(current_binary, work)
    path = os.path.join(backups, name)
    with zipfile.ZipFile(path) as archive:
        names = archive.namelist()
    if ".storebackup/format-2" not in names:
        # Python's zipfile appends an entry and rewrites the central directory; every other
        # entry's bytes stay as they are.
        with zipfile.ZipFile(path, "a") as archive:
            info = zipfile.ZipInfo(".storebackup/format-2", date_time=(2026, 1, 1, 0, 0, 0))
            info.external_attr = (0o100644 << 16)
            info.create_system = 3
            archive.writestr(info, b"")
    assert_refused_without_trace(old_binary, backups, name, work)


def make_chain(work):
    """A format-3 full and an incremental on it, by the independent writer."""
    folder = os.path.join(work, "chain")
    made = run([sys.executable, MAKE_INCREMENTAL, folder, "--nights", "2"])
    assert made.returncode == 0, made.stderr
    with open(os.path.join(folder, "chain.json")) as handle:
        names = json.load(handle)["backups"]
    return os.path.join(folder, "backups"), names


@pytest.mark.parametrize("which", ["full", "incremental"])
def test_old_binary_refuses_format_3(old_binary, work, which):
    backups, names = make_chain(work)
    assert_refused_without_trace(old_binary, backups, names[0 if which == "full" else 1], work)


@pytest.mark.parametrize("which", ["full", "incremental"])
def test_format_2_binary_refuses_format_3_as_newer(format2_binary, work, which):
    backups, names = make_chain(work)
    said = assert_refused_without_trace(format2_binary, backups, names[0 if which == "full" else 1], work)
    assert "made by a newer storebackup (format 3)" in said, said
