"""What would stop a run on each host, found before any task starts (make check HOSTS=...; run first by every
launch over --hosts or --slurm): ssh with a known key, the repository at the same commit, its .venv with
Horovod's build, the same Python, TensorFlow and Horovod as here, the model file as here, the working directory
(shared or not), the interface towards this machine, free ports, the clock; then between the hosts: each
resolves the others' names, reaches a port on each, and reaches this machine's rendezvous. One line per problem,
naming the host or both ends; exit 2. docs/cluster.md, "Before a run: make check".

    python -m launcher.preflight --hosts=node1:1,node2:1         (make check HOSTS=node1:1,node2:1)
    python -m launcher.preflight --slurm                          (inside an allocation: its nodes)
"""
import concurrent.futures
import ipaddress
import json
import os
import shlex
import socket
import subprocess
import sys
import time

import harness
from harness import REPO, flags, models
from launcher import machines
from launcher.starters.remote import GLOO_HOSTNAME_SHIM, OnHosts, address_towards
from launcher.starters.srun import Srun
from launcher.starters.ssh import Ssh

CLOCK_SKEW_SECONDS = 2  # beyond it logs and checkpoints disagree on when, and munge refuses Slurm's credentials

# Run on a host by its shell, with this machine's interpreter path: that interpreter's absence is the first fact.
SHELL = 'if [ -x "$1" ]; then exec "$@"; else echo "{\\"python\\": false}"; fi'

# Run on a host (argv: repository, working directory, the host-name shim, the model file, the hosts' names): what
# it has, as one JSON line.
FACTS = """
import glob, hashlib, importlib.metadata, importlib.util, json, os, platform, socket, subprocess, sys, time
repo, workdir, model, names = sys.argv[1], sys.argv[2], sys.argv[4], sys.argv[5].split(",")
def own_name():
    try:
        return socket.gethostbyname(socket.gethostname())
    except OSError:
        return None
def commit():
    try:
        return subprocess.run(["git", "-C", repo, "rev-parse", "HEAD"], capture_output=True, text=True,
                              check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return None
spec = importlib.util.find_spec("horovod")
shim = os.path.isfile(sys.argv[3]) and open(sys.argv[3], "rb").read(4) == b"\\x7fELF"
horovod = bool(spec and glob.glob(os.path.join(os.path.dirname(spec.origin), "tensorflow", "mpi_lib*.so")))
def version(package):
    try:
        return importlib.metadata.version(package)
    except importlib.metadata.PackageNotFoundError:
        return None
def address(name):
    try:
        return socket.gethostbyname(name)
    except OSError:
        return None
digest = hashlib.sha256(open(model, "rb").read()).hexdigest() if os.path.isfile(model) else None
print(json.dumps({"python": True, "time": time.time(), "repo": os.path.isdir(repo), "commit": commit(),
                  "versions": {"Python": platform.python_version(), "TensorFlow": version("tensorflow-cpu"),
                               "Horovod": version("horovod")}, "model": digest,
                  "resolves": {name: address(name) for name in names},
                  "name": socket.gethostname(), "name_address": own_name(),
                  "horovod": horovod, "workdir": os.path.isdir(workdir), "gloo_hostname_shim": shim}))
"""


def facts(command, model, hosts):
    """(what `command` ([argv] -> its command line) finds where it runs, as a dict, or the error's last line; the
    seconds the call took; the time here halfway through)."""
    started = time.time()
    result = subprocess.run(command(["sh", "-c", SHELL, "sh", sys.executable, "-c", FACTS, REPO, os.getcwd(),
                                     GLOO_HOSTNAME_SHIM, model, ",".join(hosts)]),
                            stdin=subprocess.DEVNULL, capture_output=True, text=True)
    ended = time.time()
    lines = result.stdout.strip().splitlines()
    if result.returncode or not lines:
        return (result.stderr.strip().splitlines() or [f"exit status {result.returncode}"])[-1], 0, 0
    return json.loads(lines[-1]), ended - started, (started + ended) / 2


def problems(starter, require_shared=False, gloo=True, model=None):
    """(one line per problem on `starter`'s hosts, each naming its host, or the two hosts between which it lies; one
    line per host it could look at, saying what it found). `model`: the model file every host must have as here."""
    hosts = [host for host, _ in starter.hosts]
    model = model or os.path.join(REPO, "models", "lstm.py")
    here = facts(lambda argv: argv, model, hosts)[0]
    gloo = gloo and not all(loopback(host) for host in hosts)  # all on this machine: loopback serves
    with concurrent.futures.ThreadPoolExecutor(len(hosts)) as pool:  # each host's round trips at once
        checked = list(pool.map(lambda host: check_host(starter, host, here, require_shared, gloo, model, hosts),
                                hosts))
    found = [f"{host}: {problem}" for host, (there, _, _) in zip(hosts, checked) for problem in there]
    looked = {host: facts_there for host, (_, _, facts_there) in zip(hosts, checked) if facts_there}
    if len(looked) > 1:  # then between the hosts it could look at
        found += between(starter, list(looked), looked)
    return found, [f"{host}: {summary}" for host, (_, summary, _) in zip(hosts, checked) if summary]


def between(starter, hosts, found):
    """What stops the hosts reaching one another: a name another host cannot resolve (or resolves to loopback), a
    port that another host, or this machine's rendezvous, cannot reach; a line naming both ends each."""
    problems = [f"{host} cannot resolve {other}'s name" if address is None else
                f"{host} resolves {other} to {address}, a loopback address" for host in hosts
                for other, address in found[host]["resolves"].items()
                if other != host and (address is None or  # (hosts all on this machine may be loopback's)
                                      ipaddress.ip_address(address).is_loopback and not loopback(other))]
    return problems + unreachable_ports(starter, hosts)


# Run on a host: listen on a free port where the tasks' servers listen (from 10000 to the ephemeral range, as
# remote.PROBE draws them), print it, accept for argv[1] seconds.
LISTENER = """
import random, socket, sys, time
try:
    ephemeral_start = int(open("/proc/sys/net/ipv4/ip_local_port_range").read().split()[0])
except (OSError, ValueError, IndexError):
    ephemeral_start = 32768
server = socket.socket()
for port in random.sample(range(10000, ephemeral_start), ephemeral_start - 10000):
    try:
        server.bind(("", port))
        break
    except OSError:
        pass
server.listen(64)
print(server.getsockname()[1], flush=True)
server.settimeout(0.2)
end = time.monotonic() + float(sys.argv[1])
while time.monotonic() < end:
    try:
        server.accept()[0].close()
    except OSError:
        pass
"""

# Run on a host (argv: name:host:port,...): the names of the ends it cannot connect to, one a line.
CONNECTOR = """
import socket, sys
for end in sys.argv[1].split(","):
    name, host, port = end.rsplit(":", 2)
    try:
        socket.create_connection((host, int(port)), timeout=5).close()
    except OSError as error:
        print(name, error.strerror or error, sep="\\t")
"""
LISTEN_SECONDS = 30


def unreachable_ports(starter, hosts):
    """A port on each host from every other host, and the launcher's rendezvous (an ephemeral port here, as
    Horovod's RendezvousServer takes) from every host."""
    listeners = {host: subprocess.Popen(starter.command(host, [sys.executable, "-c", LISTENER, str(LISTEN_SECONDS)]),
                                        stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                                        text=True) for host in hosts}
    rendezvous = socket.socket()
    try:
        rendezvous.bind(("", 0))  # as Horovod's RendezvousServer binds
        rendezvous.listen(64)
        ports = {host: listener.stdout.readline().strip() for host, listener in listeners.items()}
        found = []

        def try_from(host):
            ends = [f"{other}:{other}:{ports[other]}" for other in hosts if other != host and ports[other]]
            ends.append(f"this machine's rendezvous:{address_towards(host)[0]}:{rendezvous.getsockname()[1]}")
            result = subprocess.run(starter.command(host, [sys.executable, "-c", CONNECTOR, ",".join(ends)]),
                                    stdin=subprocess.DEVNULL, capture_output=True, text=True)
            return [line.split("\t", 1) for line in result.stdout.splitlines() if "\t" in line]
        with concurrent.futures.ThreadPoolExecutor(len(hosts)) as pool:
            for host, failed in zip(hosts, pool.map(try_from, hosts)):
                found += [f"{host} cannot connect to a port on {end} ({why}): a firewall between them? The tasks "
                          f"use ports from 10000 to the ephemeral range" for end, why in failed]
        return found + [f"{host}: no port of its own could be listened on" for host, port in ports.items() if not port]
    finally:
        rendezvous.close()
        for listener in listeners.values():
            listener.kill()
            listener.wait()


def check_host(starter, host, here, require_shared, gloo, model, hosts):
    """(problems on `host`, what it found there in a line or None if it could not look, its facts)."""
    there, seconds, midpoint = facts(lambda argv: starter.command(host, argv), model, hosts)
    if isinstance(there, str):
        return [ssh_problem(there)], None, None
    if not there["python"]:
        return [f"no {sys.executable}: make setup there (the repository and its .venv at the same path on every "
                f"host)"], None, None
    found = []
    if not there["repo"]:
        found.append(f"no repository at {REPO}")
    elif there["commit"] != here["commit"]:
        found.append(f"the repository is at commit {(there['commit'] or 'unknown')[:12]}, this one at "
                     f"{(here['commit'] or 'unknown')[:12]}: check out the same on every host")
    if not there["horovod"]:
        found.append("no Horovod build in .venv: make setup there")
    shared = there["workdir"] and starter.shares_workdir(host)  # by the ports probe's token file
    if not there["workdir"]:
        found.append(f"no working directory {os.getcwd()}: create it, or run from one every host has")
    elif require_shared and not shared:
        found.append(f"does not see this working directory {os.getcwd()} (the results are read back from it): "
                     f"run from a file system every host shares")
    on_loopback = bool(there["name_address"]) and ipaddress.ip_address(there["name_address"]).is_loopback
    if gloo and on_loopback and not there["gloo_hostname_shim"]:
        found.append(f"its host name {there['name']} resolves there to {there['name_address']}, where Horovod's Gloo "
                     f"would bind, and .venv has no {os.path.basename(GLOO_HOSTNAME_SHIM)} to give it the machine's "
                     f"address: make setup there")
    skew = there["time"] - midpoint
    if abs(skew) > CLOCK_SKEW_SECONDS + seconds / 2:
        found.append(f"its clock is {skew:+.1f} s off this machine's: synchronise the clocks (NTP)")
    interface = None
    if there["workdir"]:
        interface = starter.interface_on(host, address_towards(host)[0])
        if interface is None:
            found.append("no interface reaches this machine")
        if not starter.free_ports(host, 1):
            found.append("no free port below its ephemeral range")
    summary = (f"commit {(there['commit'] or 'unknown')[:12]}, Horovod {'built' if there['horovod'] else 'missing'}, "
               f"workdir {'shared' if shared else 'private' if there['workdir'] else 'missing'}"
               f"{f', interface {interface[0]} ({interface[1]})' if interface else ''}, clock {skew:+.1f} s "
               f"(+-{seconds / 2:.1f})")
    found += [f"{name} {theirs} there, {ours} on this machine ({socket.gethostname()}): the same on every host"
              for name, theirs in there["versions"].items() if theirs != (ours := here["versions"][name])]
    if there["model"] != here["model"]:
        found.append(f"the model file {os.path.relpath(model, REPO) if model.startswith(REPO) else model} "
                     + ("is missing there" if there["model"] is None else "differs there from this machine's")
                     + f" ({socket.gethostname()}): copy it, or commit it and check out the same commit")
    return found, summary, there


def loopback(host):
    try:
        return ipaddress.ip_address(socket.gethostbyname(host)).is_loopback
    except OSError:
        return False


def ssh_problem(error):
    """A failed call's last line as the problem it names."""
    if "Host key verification failed" in error:
        return "ssh: its host key is not in known_hosts (ssh to it once by hand, or ssh-keyscan it)"
    if "Permission denied" in error:
        return f"ssh: no key it accepts ({error}): ssh-copy-id, or IdentityFile in ~/.ssh/config"
    if "can't cd" in error or "No such file or directory" in error:
        return f"no working directory {os.getcwd()}: create it, or run from one every host has"
    return f"unreachable over ssh: {error}"


def check(starter, require_shared=False, gloo=True, model=None):
    """Raise UsageError, one line per problem, if `starter` starts tasks on other hosts and they have any; `gloo`:
    Horovod's ranks will talk over Gloo."""
    if isinstance(starter, OnHosts):
        found, _ = problems(starter, require_shared, gloo, model)
        if found:
            raise harness.UsageError("\n".join(found))


def main():
    parser = flags.FlagSet("python -m launcher.preflight", __doc__)
    machines.define_flags(parser, net=None)  # make check HOSTS=
    flags.DEFINE_boolean("slurm", False, "the nodes of the Slurm allocation this runs in", flag_values=parser)
    flags.DEFINE_boolean("require_shared_workdir", False, "a working directory every host does not share is a "
                         "problem (Parallax's partition search needs one)", flag_values=parser)
    flags.DEFINE_string("model", "lstm", "the model whose file every host must have as this machine has it",
                        flag_values=parser)
    args = flags.parse(parser)
    model = models.path_of(args.model)
    if bool(args.hosts) == args.slurm:
        raise harness.UsageError("--hosts=HOST:SLOTS,... or --slurm: which hosts to check")
    if args.slurm and "SLURM_JOB_ID" not in os.environ:
        raise harness.UsageError("--slurm: not inside a Slurm allocation (no SLURM_JOB_ID)")
    starter = Srun.from_flags(args) if args.slurm else Ssh(args.hosts, args.ssh_config)
    found, report = problems(starter, args.require_shared_workdir, model=model)
    for line in report:
        print(f"check: {line}")
    if found:
        raise harness.UsageError("\n".join(found))
    print(f"check: {len(starter.hosts)} hosts ready: {shlex.join(h for h, _ in starter.hosts)}")
    return 0


if __name__ == "__main__":
    harness.main(main)
