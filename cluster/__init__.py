"""An emulated cluster of real nodes on this machine, for HOSTS= runs before there is a cluster (make cluster NODES=3,
make cluster-down): node i is a network namespace with its own address on a shaped link, its own host name
(nodeI) and /tmp, and OpenSSH's sshd. docs/cluster.md ("An emulated cluster of nodes") explains it."""
import ipaddress
import os
import shlex
import shutil
import signal
import socket
import subprocess
import time

import harness
from harness import REPO
from harness.starters.netns import PREFIX_LENGTH, ip

PREFIX = "lstmcluster"  # of its namespaces and of the host's interface to them
STATE = "/run/lstm-cluster"  # its keys, configurations and logs; /run: gone at reboot, as the namespaces are
HOSTS_FILE = "/etc/hosts"
SSH_CLIENT_CONFIG = "/etc/ssh/ssh_config.d/lstm-cluster.conf"  # Debian's ssh_config includes this directory
HOST_ADDRESS = "198.19.255.253"  # this machine's end, on the nodes' network
FIRST_NODE = ipaddress.ip_address("198.18.0.1")  # RFC 2544's benchmark range: no real network's
BEGIN, END = "# lstm-cluster begin", "# lstm-cluster end"  # its block of HOSTS_FILE
SSHD_START_SECONDS = 20


def names(nodes):
    return [f"node{i + 1}" for i in range(nodes)]


def addresses(nodes):
    return [str(FIRST_NODE + i) for i in range(nodes)]


def nodes_up():
    """The names of the nodes up now (none: an empty list)."""
    listed = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout.split()
    return sorted((n.split("-", 1)[1] for n in listed if n.startswith(f"{PREFIX}-node")), key=lambda n: int(n[4:]))


def up(nodes, link=None):
    """Start `nodes` nodes joined by links like `link` (None: unshaped), unless they are up already; an earlier
    cluster of another size or link goes first. Returns the HOSTS= value that puts one task on each."""
    if os.geteuid() != 0:
        raise harness.UsageError("make cluster: root only (network namespaces, sshd, /etc/hosts)")
    built = os.path.join(STATE, "up")  # written last: what is up, complete
    if nodes_up() != names(nodes) or not os.path.exists(built) or open(built).read() != f"{nodes} {link}":
        down()
        try:
            _build(nodes, link)
        except BaseException:
            down()
            raise
    return ",".join(f"{name}:1" for name in names(nodes))


def _build(nodes, link):
    os.makedirs(STATE)
    switch = f"{PREFIX}-switch"
    ip("netns", "add", switch)
    ip("link", "add", "switch", "type", "bridge", namespace=switch)
    ip("link", "set", "switch", "up", namespace=switch)
    # This machine's own port on the switch: the launcher, ssh and the names reach the nodes through it.
    ip("link", "add", f"{PREFIX}0", "type", "veth", "peer", "name", "host", "netns", switch)
    ip("link", "set", "host", "master", "switch", namespace=switch)
    ip("link", "set", "host", "up", namespace=switch)
    ip("addr", "add", f"{HOST_ADDRESS}/{PREFIX_LENGTH}", "dev", f"{PREFIX}0")
    ip("link", "set", f"{PREFIX}0", "up")
    _keys()
    for i, (name, address) in enumerate(zip(names(nodes), addresses(nodes))):
        namespace = f"{PREFIX}-{name}"
        ip("netns", "add", namespace)
        ip("link", "set", "lo", "up", namespace=namespace)
        ip("link", "add", name, "type", "veth", "peer", "name", "eth0", "netns", namespace, namespace=switch)
        ip("link", "set", name, "master", "switch", namespace=switch)
        ip("addr", "add", f"{address}/{PREFIX_LENGTH}", "dev", "eth0", namespace=namespace)
        ip("link", "set", "eth0", "up", namespace=namespace)
        ip("link", "set", name, "up", namespace=switch)
        if link:
            link.shape("eth0", namespace)  # what the node sends
            link.shape(name, switch)  # what it receives
        _start_sshd(name, address, namespace)
    _write_block(HOSTS_FILE, "".join(f"{a} {n}\n" for n, a in zip(names(nodes), addresses(nodes))))
    with open(SSH_CLIENT_CONFIG, "w") as f:
        f.write(f"Host {' '.join(names(nodes))}\n  IdentityFile {STATE}/client_key\n  IdentitiesOnly yes\n"
                f"  UserKnownHostsFile {STATE}/known_hosts\n  StrictHostKeyChecking yes\n")
    for name, address in zip(names(nodes), addresses(nodes)):
        _wait_for_sshd(name, address)
    with open(os.path.join(STATE, "up"), "w") as f:
        f.write(f"{nodes} {link}")


def _keys():
    """A client key for this machine's users and one host key for every node, in known_hosts under each name."""
    for key in ("client_key", "host_key"):
        subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", f"lstm-cluster {key}", "-f",
                        os.path.join(STATE, key)], check=True)


def _start_sshd(name, address, namespace):
    """sshd in node `name`'s namespace, with its host name and a /tmp of its own (what its logins see too)."""
    config = os.path.join(STATE, f"sshd_{name}.conf")
    with open(config, "w") as f:
        f.write(f"ListenAddress {address}\nHostKey {STATE}/host_key\nAuthorizedKeysFile {STATE}/client_key.pub\n"
                f"PidFile {STATE}/sshd_{name}.pid\nStrictModes no\nUsePAM no\nPasswordAuthentication no\n"
                f"KbdInteractiveAuthentication no\nPermitRootLogin prohibit-password\nMaxStartups 100\n")
    with open(os.path.join(STATE, "host_key.pub")) as key, open(os.path.join(STATE, "known_hosts"), "a") as known:
        known.write(f"{name},{address} {key.read()}")
    os.makedirs("/run/sshd", exist_ok=True)  # its privilege-separation directory
    sshd = shutil.which("sshd") or "/usr/sbin/sshd"
    with open(os.path.join(STATE, f"sshd_{name}.log"), "w") as log:
        subprocess.Popen(["ip", "netns", "exec", namespace, "unshare", "--uts", "--mount", "--propagation", "private",
                          "sh", "-c", " && ".join([f"hostname {name}", *private_tmp(),
                                                   f"exec {sshd} -D -e -f {config}"])],
                         stdin=subprocess.DEVNULL, stdout=log, stderr=log, start_new_session=True)


def private_tmp():
    """Shell commands that give a node a /tmp of its own, the repository kept at its path if it lies under /tmp
    (as a shared home directory would keep it): every node runs the same code, as on a real cluster."""
    if os.path.commonpath([REPO, "/tmp"]) != "/tmp":
        return ["mount -t tmpfs tmpfs /tmp"]
    host_tmp = os.path.join(STATE, "host-tmp")
    return [f"mkdir -p {host_tmp}", f"mount --bind /tmp {host_tmp}", "mount -t tmpfs tmpfs /tmp",
            f"mkdir -p {shlex.quote(REPO)}",
            f"mount --bind {shlex.quote(os.path.join(host_tmp, os.path.relpath(REPO, '/tmp')))} {shlex.quote(REPO)}"]


def _wait_for_sshd(name, address):
    deadline = time.monotonic() + SSHD_START_SECONDS
    while True:
        try:
            socket.create_connection((address, 22), timeout=1).close()
            return
        except OSError:
            if time.monotonic() > deadline:
                log = open(os.path.join(STATE, f"sshd_{name}.log")).read().strip().splitlines()
                raise harness.UsageError(f"make cluster: {name}'s sshd did not start ({(log or ['no output'])[-1]})")
            time.sleep(0.2)


def down():
    """Stop every node's processes and remove the namespaces, the names, the ssh configuration and the keys."""
    listed = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout.split()
    for namespace in [n for n in listed if n.startswith(f"{PREFIX}-")]:
        for pid in subprocess.run(["ip", "netns", "pids", namespace], capture_output=True, text=True).stdout.split():
            try:
                os.kill(int(pid), signal.SIGKILL)
            except ProcessLookupError:
                pass
        subprocess.run(["ip", "netns", "delete", namespace], capture_output=True)  # its veth pairs go with it
    subprocess.run(["ip", "link", "delete", f"{PREFIX}0"], capture_output=True)
    _write_block(HOSTS_FILE, "")
    for path in (SSH_CLIENT_CONFIG,):
        if os.path.exists(path):
            os.remove(path)
    shutil.rmtree(STATE, ignore_errors=True)


def _write_block(path, text):
    """Replace this cluster's block of `path` with `text` (empty: remove it), keeping every other line."""
    with open(path) as f:
        lines = f.read().splitlines(keepends=True)
    if BEGIN + "\n" in lines:
        start, end = lines.index(BEGIN + "\n"), lines.index(END + "\n")
        lines = lines[:start] + lines[end + 1:]
    if text:
        lines += [BEGIN + "\n", text, END + "\n"]
    with open(path, "w") as f:  # in place: /etc/hosts may be a bind mount, which a rename would not reach
        f.write("".join(lines))
