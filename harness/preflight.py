"""What would stop a run on each host, found before any task starts (make check HOSTS=...; run first by every
launch over --hosts or --slurm): ssh with a known key, the repository at the same commit, its .venv with
Horovod's build, the working directory (shared or not), the interface towards this machine, free ports, the
clock. One line per problem, naming the host; exit 2. docs/cluster.md, "Before a run: make check".

    python -m harness.preflight --hosts=node1:1,node2:1         (make check HOSTS=node1:1,node2:1)
    python -m harness.preflight --slurm                          (inside an allocation: its nodes)
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
from harness import REPO, flags
from harness.starters.remote import OnHosts, address_towards
from harness.starters.srun import Srun
from harness.starters.ssh import Ssh

CLOCK_SKEW_SECONDS = 2  # beyond it logs and checkpoints disagree on when, and munge refuses Slurm's credentials

# Run on a host by its shell, with this machine's interpreter path: that interpreter's absence is the first fact.
SHELL = 'if [ -x "$1" ]; then exec "$@"; else echo "{\\"python\\": false}"; fi'

# Run on a host (argv: repository, working directory): what it has, as one JSON line.
FACTS = """
import glob, importlib.util, json, os, socket, subprocess, sys, time
repo, workdir = sys.argv[1:3]
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
horovod = bool(spec and glob.glob(os.path.join(os.path.dirname(spec.origin), "tensorflow", "mpi_lib*.so")))
print(json.dumps({"python": True, "time": time.time(), "repo": os.path.isdir(repo), "commit": commit(),
                  "name": socket.gethostname(), "name_address": own_name(),
                  "horovod": horovod, "workdir": os.path.isdir(workdir)}))
"""


def facts(command):
    """(what `command` ([argv] -> its command line) finds where it runs, as a dict, or the error's last line; the
    seconds the call took; the time here halfway through)."""
    started = time.time()
    result = subprocess.run(command(["sh", "-c", SHELL, "sh", sys.executable, "-c", FACTS, REPO, os.getcwd()]),
                            stdin=subprocess.DEVNULL, capture_output=True, text=True)
    ended = time.time()
    lines = result.stdout.strip().splitlines()
    if result.returncode or not lines:
        return (result.stderr.strip().splitlines() or [f"exit status {result.returncode}"])[-1], 0, 0
    return json.loads(lines[-1]), ended - started, (started + ended) / 2


def problems(starter, require_shared=False, gloo=True):
    """(one line per problem on `starter`'s hosts, each naming its host; one line per host it could look at, saying
    what it found)."""
    here = facts(lambda argv: argv)[0]
    hosts = [host for host, _ in starter.hosts]
    gloo = gloo and not all(loopback(host) for host in hosts)  # all on this machine: loopback serves
    with concurrent.futures.ThreadPoolExecutor(len(hosts)) as pool:  # each host's round trips at once
        checked = list(pool.map(lambda host: check_host(starter, host, here, require_shared, gloo), hosts))
    found = [f"{host}: {problem}" for host, (there, _) in zip(hosts, checked) for problem in there]
    return found, [f"{host}: {summary}" for host, (_, summary) in zip(hosts, checked) if summary]


def check_host(starter, host, here, require_shared, gloo):
    """(problems on `host`, what it found there in a line, or None if it could not look)."""
    there, seconds, midpoint = facts(lambda argv: starter.command(host, argv))
    if isinstance(there, str):
        return [ssh_problem(there)], None
    if not there["python"]:
        return [f"no {sys.executable}: make setup there (the repository and its .venv at the same path on every "
                f"host)"], None
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
    if gloo and there["name_address"] and ipaddress.ip_address(there["name_address"]).is_loopback:
        found.append(f"its host name {there['name']} resolves there to {there['name_address']}, and Horovod's Gloo "
                     f"binds its process sets' connections to that address whatever the interface "
                     f"(gloo_context.cc, InitializeForProcessSet): map the name to the machine's address in "
                     f"/etc/hosts, or run Horovod with MPI=1")
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
    return found, summary


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


def check(starter, require_shared=False, gloo=True):
    """Raise UsageError, one line per problem, if `starter` starts tasks on other hosts and they have any; `gloo`:
    Horovod's ranks will talk over Gloo."""
    if isinstance(starter, OnHosts):
        found, _ = problems(starter, require_shared, gloo)
        if found:
            raise harness.UsageError("\n".join(found))


def main():
    parser = flags.FlagSet("python -m harness.preflight", __doc__)
    flags.DEFINE_parsed("hosts", None, flags.host_slots, "host:slots,... (make check HOSTS=)", parser)
    flags.DEFINE_string("ssh_config", None, "an ssh_config(5) file for reaching the hosts (ssh -F)", flag_values=parser)
    flags.DEFINE_boolean("slurm", False, "the nodes of the Slurm allocation this runs in", flag_values=parser)
    flags.DEFINE_boolean("require_shared_workdir", False, "a working directory every host does not share is a "
                         "problem (make verify's)", flag_values=parser)
    args = flags.parse(parser)
    if bool(args.hosts) == args.slurm:
        raise harness.UsageError("--hosts=HOST:SLOTS,... or --slurm: which hosts to check")
    if args.slurm and "SLURM_JOB_ID" not in os.environ:
        raise harness.UsageError("--slurm: not inside a Slurm allocation (no SLURM_JOB_ID)")
    starter = Srun.from_flags(args) if args.slurm else Ssh(args.hosts, args.ssh_config)
    found, report = problems(starter, args.require_shared_workdir)
    for line in report:
        print(f"check: {line}")
    if found:
        raise harness.UsageError("\n".join(found))
    print(f"check: {len(starter.hosts)} hosts ready: {shlex.join(h for h, _ in starter.hosts)}")
    return 0


if __name__ == "__main__":
    harness.main(main)
