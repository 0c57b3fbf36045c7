"""Every run this project knows, named once: verify, make bench, bench.predict and the report read this table,
so a run is `tf` everywhere (verify-tf.json, its bench records, its colour); adding a runner is one entry."""
import dataclasses

@dataclasses.dataclass(frozen=True)
class Architecture:
    """What the launcher starts for an architecture: the script every task runs, and which tasks there are."""
    script: str
    parameter_servers: bool  # ps tasks hold variables; the runner is given the cluster (--ps_hosts, ...)
    horovod_ranks: bool      # the workers are Horovod ranks: a rendezvous, Gloo (or mpirun) between them
    partition_search: bool = False  # Parallax's search of the sparse variables' parts (--search_partitions)


ARCHITECTURES = {"tf": Architecture("run_tf.py", parameter_servers=True, horovod_ranks=False),
                 "horovod": Architecture("run_horovod.py", parameter_servers=False, horovod_ranks=True),
                 "parallax": Architecture("run_parallax.py", parameter_servers=True, horovod_ranks=True,
                                          partition_search=True)}

RING_ORDER = "Horovod's ring allreduce adds the workers' dense gradients in ring order, not worker order"
MACHINE_ORDER = "local aggregation adds each machine's sparse gradients first, then the machines'"


@dataclasses.dataclass(frozen=True)
class Run:
    name: str
    title: str               # as a table or a plot's legend names it
    architecture: str        # a key of ARCHITECTURES; None: run.py on one device (the reference)
    flags: tuple             # the runner flags that make this variant
    traffic: str             # its step's flows in bench/traffic.py; None: it sends nothing (the reference)
    verify: str              # "reference", "identical" (bit for bit at W <= 2), "different" (async); None: not verified
    rounding: str            # why it may differ by rounding with more than 2 workers; None: it may not (identical)
    colour: str              # one per run in every plot; variants are shades of their architecture's hue
    fault: str = None        # the task verify --faults kills before resuming ("ps0"); None: an ordinary run

    @property
    def asynchronous(self):
        """Its workers step at their own paces, which the model (it prices a synchronous step) leaves out."""
        return self.verify == "different"

    @property
    def script(self):
        return ARCHITECTURES[self.architecture].script if self.architecture else "run.py"


RUNS = {run.name: run for run in [
    Run("reference", "one device (run.py)", None, (), None, "reference", None, "#222222"),
    Run("tf", "TF-PS", "tf", (), "ps", "identical", None, "#1f77b4"),
    Run("horovod", "Horovod", "horovod", (), "allreduce", "identical", RING_ORDER, "#d62728"),
    Run("horovod-dense", "Horovod sparse-as-dense", "horovod", ("--sparse_as_dense",), "allreduce-dense",
        "identical", RING_ORDER, "#ff9896"),
    Run("parallax", "Parallax hybrid", "parallax", (), "hybrid", "identical", RING_ORDER, "#2ca02c"),
    Run("parallax-local", "Parallax hybrid, local aggregation", "parallax", ("--local_aggregation=true",),
        "hybrid-local", "identical", MACHINE_ORDER, "#98df8a"),
    # The exact reduction (harness/reduction.py): the workers' gradients added in rank order at any W.
    Run("horovod-exact", "Horovod, exact reduction", "horovod", ("--reduction=exact",), "allreduce-exact", "identical",
        None, "#8c2d04"),
    Run("parallax-exact", "Parallax hybrid, exact reduction", "parallax", ("--reduction=exact",), "hybrid-exact",
        "identical", None, "#006d2c"),
    Run("tf-async", "TF-PS asynchronous", "tf", ("--sync=false",), "ps", "different", None, "#9ecae1"),
    # TensorFlow's SyncReplicasOptimizer: synchronous, but a fast worker can fill a step's quota twice, so it
    # is not exact and verify does not run it.
    Run("tf-replicas", "TF-PS SyncReplicasOptimizer", "tf", ("--sync_replicas",), "ps", None, None, "#08519c"),
    # verify --faults: one run of each architecture once more, a task killed and the run resumed; with the exact
    # reduction, so that the resumed run must be identical at any W.
    Run("tf-fault", "TF-PS, a parameter server killed", "tf", (), "ps", "identical", None, "#6baed6", "ps0"),
    Run("horovod-fault", "Horovod, a worker killed", "horovod", ("--reduction=exact",), "allreduce-exact",
        "identical", None, "#e7969c", "worker1"),
    Run("parallax-fault", "Parallax hybrid, the chief killed", "parallax", ("--reduction=exact",), "hybrid-exact",
        "identical", None, "#74c476", "worker0"),
]}

FAULTED = [name for name, run in RUNS.items() if run.fault]
VERIFIED = [name for name, run in RUNS.items() if run.verify and not run.fault]
DISTRIBUTED = [name for name, run in RUNS.items() if run.architecture and not run.fault]
# The runs whose every step is one synchronous step of the global batch: what the performance model prices.
SYNCHRONOUS = [name for name, run in RUNS.items() if run.verify == "identical" and not run.fault]
