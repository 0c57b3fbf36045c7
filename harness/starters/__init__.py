"""How a task is started: one module per way. A starter has three methods:

    start(task) -> a subprocess.Popen whose stdout carries the task's output
    stop_all(processes, grace_seconds)   SIGTERM to every process, SIGKILL to what is left after the grace
    free_ports(host, count) -> ports free on `host` now

`local.LocalProcess` starts a task as a child process of this machine; `ssh.Ssh` on its host through a local
ssh client; `netns.NetnsProcess` inside one machine of an emulated cluster (network namespaces joined by
shaped links, `netns.EmulatedCluster` and `netns.Link`); `docker.Docker` in a container of its own. The
launcher (harness/launch.py) decides what runs where; a starter only knows how."""
