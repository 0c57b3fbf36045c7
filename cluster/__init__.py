"""An emulated cluster of real nodes on this machine, for HOSTS= and sbatch runs before there is a cluster (make
cluster NODES=3, make cluster-down): node i is a network namespace with its own address on a shaped link, its own
host name (nodeI) and /tmp, OpenSSH's sshd and Slurm's slurmd; a head node holds slurmctld and munged.
docs/cluster.md ("An emulated cluster of nodes") explains it."""
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
from launcher.starters.netns import PREFIX_LENGTH, ip

PREFIX = "lstmcluster"  # of its namespaces and of the host's interface to them
STATE = "/run/lstm-cluster"  # its keys, configurations and logs; /run: gone at reboot, as the namespaces are
HOSTS_FILE = "/etc/hosts"
SSH_CLIENT_CONFIG = "/etc/ssh/ssh_config.d/lstm-cluster.conf"  # Debian's ssh_config includes this directory
HOST_ADDRESS = "198.19.255.253"  # this machine's end, on the nodes' network
HEAD_ADDRESS = "198.19.255.254"  # the head node's: slurmctld and munged
FIRST_NODE = ipaddress.ip_address("198.18.0.1")  # RFC 2544's benchmark range: no real network's
BEGIN, END = "# lstm-cluster begin", "# lstm-cluster end"  # its block of HOSTS_FILE
SLURM_CONF = "/etc/slurm/slurm.conf"  # where Slurm's commands look: a link to the cluster's, unless one is there
PARTITION = "nodes"
CPUS = 4  # per node, whatever the machine has (config_overrides): a PS beside two workers fits on each
START_SECONDS = 30
TOOLS = ("nsenter", "unshare", "sshd", "ssh-keygen", "munged", "mungekey", "slurmctld", "slurmd", "sinfo")


def names(nodes):
    return [f"node{i + 1}" for i in range(nodes)]


def addresses(nodes):
    return [str(FIRST_NODE + i) for i in range(nodes)]


def nodes_up():
    """The names of the nodes up now (none: an empty list)."""
    listed = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout.split()
    return sorted((n.split("-", 1)[1] for n in listed if n.startswith(f"{PREFIX}-node")), key=lambda n: int(n[4:]))


def up(nodes, link=None, shared=True):
    """Start `nodes` nodes joined by links like `link` (None: unshaped), the repository shared by all or (not
    `shared`) a private copy on each, unless they are up already; an earlier cluster of another kind goes first.
    Returns the HOSTS= value that puts one task on each."""
    if os.geteuid() != 0:
        raise harness.UsageError("make cluster: root only (network namespaces, sshd, slurmd, /etc/hosts)")
    absent = [tool for tool in TOOLS if not os.path.exists(_tool(tool))]
    if absent:
        raise harness.UsageError(f"make cluster: {', '.join(absent)} not installed (make setup installs them as root)")
    built = os.path.join(STATE, "up")  # written last: what is up, complete
    kind = f"{nodes} {link} {'shared' if shared else 'private'}"
    if nodes_up() != names(nodes) or not os.path.exists(built) or open(built).read() != kind:
        down()
        try:
            _build(nodes, link, shared)
        except BaseException:
            down()
            raise
    return ",".join(f"{name}:1" for name in names(nodes))


def _build(nodes, link, shared):
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
    _write_slurm_conf(nodes)
    _plug("head", HEAD_ADDRESS, switch)
    head = _start("head", [f"{_tool('munged')} --foreground --force --socket={STATE}/munge.socket "
                    f"--key-file={STATE}/munge.key --pid-file={STATE}/munged.pid --seed-file={STATE}/munged.seed "
                    f"--log-file={STATE}/munged.log &",
                    f"exec {_tool('slurmctld')} -D -i -f {STATE}/slurm.conf"])
    shells = {}
    for name, address in zip(names(nodes), addresses(nodes)):
        _plug(name, address, switch, link)
        shells[name] = _start_node(name, address, [] if shared else private_repository(name))
    _write_block(HOSTS_FILE, "".join(f"{a} {n}\n" for n, a in zip(names(nodes), addresses(nodes))))
    with open(SSH_CLIENT_CONFIG, "w") as f:
        f.write(f"Host {' '.join(names(nodes))}\n  IdentityFile {STATE}/client_key\n  IdentitiesOnly yes\n"
                f"  UserKnownHostsFile {STATE}/known_hosts\n  StrictHostKeyChecking yes\n")
    if not os.path.lexists(SLURM_CONF):
        os.makedirs(os.path.dirname(SLURM_CONF), exist_ok=True)
        os.symlink(os.path.join(STATE, "slurm.conf"), SLURM_CONF)
    for name, address in zip(names(nodes), addresses(nodes)):
        _wait_for(lambda: _listens(address, 22), shells[name], f"{name}'s sshd did not start", f"{name}.log")
    _wait_for(lambda: _nodes_idle(nodes), head, "the Slurm nodes did not become idle", "slurmctld.log")
    with open(os.path.join(STATE, "up"), "w") as f:
        f.write(f"{nodes} {link} {'shared' if shared else 'private'}")


def _keys():
    """A client key for this machine's users and one host key for every node, in known_hosts under each name."""
    for key in ("client_key", "host_key"):
        subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", f"lstm-cluster {key}", "-f",
                        os.path.join(STATE, key)], check=True)


def _tool(name):
    return shutil.which(name) or f"/usr/sbin/{name}"  # sbin is not on every user's PATH


def _plug(name, address, switch, link=None):
    """A namespace for `name` with `address` on a port of the switch, its link shaped like `link` (None: not)."""
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


def _start(name, commands):
    """Run shell `commands` in `name`'s namespace with its host name and a /tmp of its own (what its logins and
    jobs see too), in the background, logging to STATE/<name>.log; returns its shell. cluster-down kills what is
    left."""
    with open(os.path.join(STATE, f"{name}.log"), "w") as log:
        # nsenter, not ip netns exec, which mounts a /sys of its own without the cgroups slurmd needs.
        return subprocess.Popen(["nsenter", f"--net=/run/netns/{PREFIX}-{name}", "unshare", "--uts", "--mount",
                                 "--propagation", "private", "sh", "-c",
                                 "\n".join(["set -e", f"hostname {name}", *private_tmp(), *commands])],
                                stdin=subprocess.DEVNULL, stdout=log, stderr=log, start_new_session=True)


def _start_node(name, address, mounts):
    """slurmd and sshd on node `name` after the shell commands `mounts`, with the cluster's host key; this
    machine's users log in with its key."""
    config = os.path.join(STATE, f"sshd_{name}.conf")
    with open(config, "w") as f:
        f.write(f"ListenAddress {address}\nHostKey {STATE}/host_key\nAuthorizedKeysFile {STATE}/client_key.pub\n"
                f"PidFile {STATE}/sshd_{name}.pid\nStrictModes no\nUsePAM no\nPasswordAuthentication no\n"
                f"KbdInteractiveAuthentication no\nPermitRootLogin prohibit-password\nMaxStartups 100\n")
    with open(os.path.join(STATE, "host_key.pub")) as key, open(os.path.join(STATE, "known_hosts"), "a") as known:
        known.write(f"{name},{address} {key.read()}")
    os.makedirs("/run/sshd", exist_ok=True)  # its privilege-separation directory
    return _start(name, [*mounts, f"{_tool('slurmd')} -D -f {STATE}/slurm.conf -N {name} &",
                         f"exec {_tool('sshd')} -D -e -f {config}"])


def _write_slurm_conf(nodes):
    """slurm.conf for slurmctld on the head node and a slurmd on each node, authenticated by the cluster's munge
    key; a job's processes are tracked by parentage (no cgroups here), SIGKILLed 5 s after SIGTERM."""
    subprocess.run(["mungekey", "--create", f"--keyfile={STATE}/munge.key"], check=True)
    for directory in ("state", *(f"spool_{name}" for name in names(nodes))):
        os.makedirs(os.path.join(STATE, directory))
    node_lines = "".join(f"NodeName={name} NodeAddr={address} CPUs={CPUS} RealMemory=1000 State=UNKNOWN\n"
                         for name, address in zip(names(nodes), addresses(nodes)))
    with open(os.path.join(STATE, "slurm.conf"), "w") as f:
        f.write(f"""ClusterName=lstmcluster
SlurmctldHost=head({HEAD_ADDRESS})
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthInfo=socket={STATE}/munge.socket,cred_expire=10
CredType=cred/munge
StateSaveLocation={STATE}/state
SlurmdSpoolDir={STATE}/spool_%n
SlurmctldPidFile={STATE}/slurmctld.pid
SlurmdPidFile={STATE}/slurmd_%n.pid
SlurmctldLogFile={STATE}/slurmctld.log
SlurmdLogFile={STATE}/slurmd_%n.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
SlurmdParameters=config_overrides
MpiDefault=none
AccountingStorageType=accounting_storage/none
JobAcctGatherType=jobacct_gather/none
JobCompType=jobcomp/none
ReturnToService=2
KillWait=5
{node_lines}PartitionName={PARTITION} Nodes=ALL Default=YES MaxTime=INFINITE State=UP
""")


def private_tmp():
    """Shell commands that give a node a /tmp of its own, the repository kept at its path if it lies under /tmp
    (as a shared home directory would keep it): every node runs the same code, as on a real cluster."""
    if os.path.commonpath([REPO, "/tmp"]) != "/tmp":
        return ["mount -t tmpfs tmpfs /tmp"]
    host_tmp = os.path.join(STATE, "host-tmp")
    return [f"mkdir -p {host_tmp}", f"mount --bind /tmp {host_tmp}", "mount -t tmpfs tmpfs /tmp",
            f"mkdir -p {shlex.quote(REPO)}",
            f"mount --bind {shlex.quote(os.path.join(host_tmp, os.path.relpath(REPO, '/tmp')))} {shlex.quote(REPO)}"]


def private_repository(name):
    """Shell commands that give node `name` a copy of the repository of its own at the same path (the code, data
    and .venv as this machine has them; checkpoints/, results/ and report/ empty), as on machines without a
    shared file system: what a run writes there stays on the node."""
    copy, repo = shlex.quote(os.path.join(STATE, f"repository_{name}")), shlex.quote(REPO)
    venv = f"{repo}/.venv"
    return [f"mkdir -p {copy}",
            f"tar -C {repo} --exclude=./.venv --exclude=./checkpoints --exclude=./results --exclude=./report -c . "
            f"| tar -C {copy} -x",
            f"if [ -L {venv} ]; then cp -P {venv} {copy}/.venv; "
            f"else mkdir -p {copy}/.venv && mount --bind {venv} {copy}/.venv; fi",
            f"mount --rbind {copy} {repo}"]


def _listens(address, port):
    try:
        socket.create_connection((address, port), timeout=1).close()
        return True
    except OSError:
        return False


def _nodes_idle(nodes):
    state = subprocess.run(["sinfo", "-h", "-N", "-o", "%T"], env={**os.environ, "SLURM_CONF": f"{STATE}/slurm.conf"},
                           capture_output=True, text=True)
    return state.stdout.split() == ["idle"] * nodes


def _wait_for(condition, shell, failure, log):
    """Wait for `condition` while `shell` runs; past START_SECONDS or its end, a UsageError with `log`'s last line."""
    deadline = time.monotonic() + START_SECONDS
    while not condition():
        if time.monotonic() > deadline or shell.poll() is not None:
            lines = open(os.path.join(STATE, log)).read().strip().splitlines()
            raise harness.UsageError(f"make cluster: {failure} ({(lines or ['no output'])[-1]})")
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
    if os.path.islink(SLURM_CONF) and os.readlink(SLURM_CONF).startswith(STATE):
        os.remove(SLURM_CONF)
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
