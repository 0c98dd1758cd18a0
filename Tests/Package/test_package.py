"""scripts/package end to end: build the Debian package, install it into a clean dpkg root
(no Swift toolchain on its library path), and use the installed binary as an operator would:
create, list and restore a sample store into the default local folder, read a man page,
check the completions and let systemd-analyze verify the packaged units.

STOREBACKUP_DEB=PATH reuses a package built before instead of running scripts/package.
"""
import glob
import json
import os
import re
import shutil
import sqlite3
import subprocess
import tempfile

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def run(args, **kwargs):
    kwargs.setdefault("capture_output", True)
    kwargs.setdefault("text", True)
    return subprocess.run(args, **kwargs)


@pytest.fixture(scope="module")
def package():
    work = tempfile.mkdtemp(prefix="storebackup-package-test-")
    deb = os.environ.get("STOREBACKUP_DEB")
    if not deb:
        result = run([ROOT + "/scripts/package", work + "/dist"], cwd=ROOT)
        assert result.returncode == 0, "scripts/package failed:\n" + (result.stdout + result.stderr)[-4000:]
        deb = result.stdout.strip().splitlines()[-1]
    assert os.path.isfile(deb), deb
    yield {"deb": deb, "work": work}
    shutil.rmtree(work, ignore_errors=True)


@pytest.fixture(scope="module")
def installed(package):
    """A clean dpkg root with only this package installed into it."""
    root = package["work"] + "/root"
    for folder in ("var/lib/dpkg/info", "var/lib/dpkg/updates", "var/lib/dpkg/triggers"):
        os.makedirs(os.path.join(root, folder))
    open(root + "/var/lib/dpkg/status", "w").close()
    # The root has no other packages, so its Depends cannot be met there; that they are met by
    # Debian's packages is checked on the host below (test_depends_resolve_on_debian).
    result = run(["dpkg", "--root=" + root, "--force-depends", "--force-not-root", "--force-script-chrootless",
                  "--log=/dev/null", "-i", package["deb"]])
    assert result.returncode == 0, result.stdout + result.stderr
    return root


def control_field(deb, field):
    return run(["dpkg-deb", "--field", deb, field], check=True).stdout.strip()


def test_depends_on_system_libraries_only(package):
    depends = control_field(package["deb"], "Depends")
    names = [part.strip().split(" ")[0] for part in depends.split(",")]
    for needed in ("libsqlite3-0", "libzip4", "libcurl4"):
        assert needed in names, depends
    assert not any("swift" in name for name in names), depends


def test_depends_resolve_on_debian(package):
    result = run(["apt-get", "install", "--simulate", "--no-install-recommends", package["deb"]])
    assert result.returncode == 0, result.stdout + result.stderr


def test_installed_binary_needs_no_swift_library(installed):
    binary = installed + "/usr/bin/storebackup"
    env = dict(os.environ, LD_LIBRARY_PATH="")
    ldd = run(["ldd", binary], env=env, check=True).stdout
    assert "not found" not in ldd, ldd
    assert "swift" not in ldd.lower(), ldd
    assert run([binary, "--version"], env=env).returncode == 0


def make_store(path):
    os.makedirs(path + "/.App_SUPPORT/_EXTERNAL_DATA")
    db = sqlite3.connect(path + "/App.sqlite")
    db.execute("PRAGMA journal_mode=WAL")
    db.execute("CREATE TABLE item(id INTEGER PRIMARY KEY, name TEXT)")
    db.executemany("INSERT INTO item(name) VALUES (?)", [("item %d" % n,) for n in range(2000)])
    db.commit()
    db.close()
    with open(path + "/.App_SUPPORT/_EXTERNAL_DATA/0F1E2D3C", "wb") as blob:
        blob.write(os.urandom(100_000))


def test_create_list_restore_with_the_installed_binary(installed, package):
    binary = installed + "/usr/bin/storebackup"
    home = package["work"] + "/home"
    os.makedirs(home)
    # The default destination: $XDG_DATA_HOME/storebackup/backups.
    env = {"PATH": "/usr/bin:/bin", "HOME": home, "XDG_DATA_HOME": home + "/data", "LD_LIBRARY_PATH": ""}
    store = package["work"] + "/Stores"
    make_store(store)

    created = run([binary, "create", store], env=env)
    assert created.returncode == 0, created.stderr
    listed = run([binary, "list", "--json"], env=env)
    assert listed.returncode == 0, listed.stderr
    backups = json.loads(listed.stdout)
    assert len(backups) == 1 and backups[0]["name"].endswith(" Stores.zip"), listed.stdout
    assert glob.glob(home + "/data/storebackup/backups/* Stores.zip")

    restored = package["work"] + "/Restored"
    result = run([binary, "restore", "latest", restored, "--yes"], env=env)
    assert result.returncode == 0, result.stderr
    db = sqlite3.connect(restored + "/App.sqlite")
    assert db.execute("SELECT count(*) FROM item").fetchone()[0] == 2000
    assert db.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    db.close()
    with open(store + "/.App_SUPPORT/_EXTERNAL_DATA/0F1E2D3C", "rb") as a, \
            open(restored + "/.App_SUPPORT/_EXTERNAL_DATA/0F1E2D3C", "rb") as b:
        assert a.read() == b.read()


@pytest.mark.parametrize("page", ["storebackup", "storebackup-create", "storebackup-restore", "storebackup-list"])
def test_man_pages_render(installed, page):
    path = installed + "/usr/share/man/man1/%s.1.gz" % page
    assert os.path.isfile(path), sorted(os.listdir(installed + "/usr/share/man/man1"))
    rendered = run(["man", "-l", "-Tutf8", path], env=dict(os.environ, MANPAGER="cat", MANWIDTH="100"))
    assert rendered.returncode == 0, rendered.stderr
    # Bold and underline come as overstrikes (X\bX, _\bX): read the plain text.
    text = re.sub(".\x08", "", rendered.stdout)
    assert "NAME" in text and "SYNOPSIS" in text, text[:2000]
    if page == "storebackup-create":
        assert "--to" in text and "--encrypt" in text, text[:4000]


def test_man_storebackup_create_is_found_by_name(installed):
    # As `man storebackup-create` after installing: look the page up in the root's man path.
    result = run(["man", "-M", installed + "/usr/share/man", "-w", "storebackup-create"])
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip().endswith("storebackup-create.1.gz")
    # The pages' SEE ALSO names them storebackup.create(1): that name finds the same page.
    dotted = installed + "/usr/share/man/man1/storebackup.create.1.gz"
    assert os.path.islink(dotted) and os.readlink(dotted) == "storebackup-create.1.gz"


def test_completions(installed):
    bash = installed + "/usr/share/bash-completion/completions/storebackup"
    assert run(["bash", "-n", bash]).returncode == 0
    for path in (bash, installed + "/usr/share/zsh/vendor-completions/_storebackup",
                 installed + "/usr/share/fish/vendor_completions.d/storebackup.fish"):
        text = open(path).read()
        for command in ("create", "restore", "verify"):
            assert command in text, path


def test_systemd_units_verify(installed, package):
    units = package["work"] + "/units"
    os.makedirs(units)
    names = ["storebackup.service", "storebackup-oneshot.service", "storebackup-oneshot.timer"]
    for name in names:
        text = open(installed + "/lib/systemd/system/" + name).read()
        if name.endswith(".service"):
            assert "ExecStart=/usr/bin/storebackup " in text, text
        # systemd-analyze checks that ExecStart's binary exists: point it at the installed one.
        with open(os.path.join(units, name), "w") as unit:
            unit.write(text.replace("/usr/bin/storebackup", installed + "/usr/bin/storebackup"))
    analyze = shutil.which("systemd-analyze")
    assert analyze, "systemd-analyze is missing (scripts/install-deps installs systemd)"
    result = run([analyze, "verify", "--man=no"] + [os.path.join(units, name) for name in names])
    assert result.returncode == 0 and not result.stderr.strip(), result.stderr


def test_sample_configuration_is_shipped(installed):
    assert os.path.isfile(installed + "/usr/share/doc/storebackup/examples/storebackup.yml")
    assert os.path.isfile(installed + "/usr/share/doc/storebackup/examples/grafana/storebackup.json")
    assert os.path.isfile(installed + "/usr/share/doc/storebackup/operations.md")
