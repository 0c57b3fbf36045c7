"""The launcher: starts a distributed run's tasks wherever they run (this machine, an emulated cluster, hosts over
ssh, Slurm job steps, mpirun, containers), watches them and tears them down (`python -m launcher`, launch.py).
Beside it the starters (starters/), the preflight (make check), the tasks' lifeline on other hosts, Parallax's
partition search and the host-name shim for Horovod's Gloo. It uses harness/, what the runners share; harness/
never uses it."""
