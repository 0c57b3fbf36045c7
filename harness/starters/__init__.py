"""How a task is started: one module per way, each a starter class the launcher picks by its flag (launch.py
STARTERS). Each starts a local process that stands for the task (the task itself, or its ssh, srun or docker
client), so each is a `local.LocalProcess`, which gives the protocol:

    from_flags(args) -> the starter for the launcher's flags, with what it needs built (a cluster, a network)
    place(num_workers, num_ps) -> (host of each worker, host of each parameter server)
    start(task) -> a subprocess.Popen whose stdout carries the task's output
    stop_all(processes, grace_seconds)   SIGTERM to every process, SIGKILL to what is left after the grace
    free_ports(host, count) -> ports free on `host` now
    shares_workdir(host) -> whether `host` sees this working directory (where the chief writes its results)
    byte_counter() -> what counts the bytes each machine's link carries, or None (only netns has such links)
    network_interface   the interface Horovod's ranks talk over, or None: the one towards the first worker
    close()             removes what from_flags built; the starter is a context manager that calls it

The launcher decides what runs; a starter decides where, and knows how."""
