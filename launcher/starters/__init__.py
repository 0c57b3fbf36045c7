"""How a task is started: a starter class per module, picked by the launcher's flag (launch.py STARTERS). Each is a
`local.LocalProcess`, whose local process stands for the task (itself, or its ssh, srun or docker client):
from_flags(args), place(num_workers, num_ps) -> (workers' hosts, servers' hosts), start(task) -> a Popen with the
task's output on stdout, stop_all(processes, grace_seconds), free_ports(host, count), shares_workdir(host),
byte_counter() (None but for netns), network_interface (None: towards the first worker), interface_on(host, address)
(the one a host's Horovod rank talks over), close() (`with` calls it)."""
