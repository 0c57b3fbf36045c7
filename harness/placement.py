"""Where a parameter-server job's variables and gradients go: parameter servers by size (shared with the traffic
model, bench/traffic.py), workers grouped by machine, and the kind of each variable's gradient."""
from harness import determinism  # noqa: F401  (before TensorFlow: it fixes TensorFlow's kernels)
import tensorflow as tf  # noqa: E402

from harness.training import StepFeed, worker_objective  # noqa: E402
from harness.variables import Params  # noqa: E402


VARIABLE_OPS = ["Variable", "VariableV2", "VarHandleOp"]  # replica_device_setter's would add lookup tables


class GreedyBySize:
    """replica_device_setter's ps_strategy: each variable to the parameter server with the fewest bytes so far.
    Every worker builds its graph in the same order, so every worker computes the same placement."""

    def __init__(self, num_ps):
        self.loads = [0] * num_ps

    def __call__(self, op):
        """The task of a variable's op (a device function's ps_strategy)."""
        return self.add(tf.TensorShape(op.get_attr("shape")).num_elements() * tf.as_dtype(op.get_attr("dtype")).size)

    def add(self, size):
        """The task of the next variable, of `size` bytes."""
        task = self.loads.index(min(self.loads))
        self.loads[task] += size
        return task


def machines(worker_hosts):
    """The workers grouped by machine: one list of worker indices per host of `worker_hosts`, in order."""
    groups = {}
    for index, address in enumerate(worker_hosts):
        groups.setdefault(address.rsplit(":", 1)[0], []).append(index)
    return list(groups.values())


def gradient_kinds(names, gradients):
    """{variable: "sparse" or "dense"} by its gradient's type; a partitioned variable's gradient is its parts' list."""
    return {name: "sparse" if isinstance(tf.nest.flatten(g)[0], tf.IndexedSlices) else "dense"
            for name, g in zip(names, gradients)}


def model_variables(model, config, seed, batches):
    """{variable: (shape, "sparse" or "dense")}, declared ones and those the model's layers make, with the type of
    their gradients, built once in a scratch graph."""
    with tf.Graph().as_default():
        params = Params(model, config, seed)
        objective, _ = StepFeed(model, config, batches, slice(None)).loss(params, seed)
        kinds = gradient_kinds(params.variables, params.gradients(worker_objective(objective)))
        return {name: (params.specs[name].shape, kind) for name, kind in kinds.items()}


def variable_kinds(model, config, seed, batches):
    """{variable: "sparse" or "dense"} by the type of the model's gradients (model_variables)."""
    return {name: kind for name, (_, kind) in model_variables(model, config, seed, batches).items()}


def print_placement(runner, params, kinds):
    """The placement table: variable (or part), kind of gradient, shape, bytes, device."""
    print(f"[{runner}] placement:", flush=True)
    for name, variable in params.variables.items():
        for part in tf.nest.flatten(variable):
            size = part.shape.num_elements() * part.dtype.size
            print(f"[{runner}]   {part.op.name:20s} {kinds[name]:6s} {str(part.shape.as_list()):12s} "
                  f"{size:>11,d} bytes  {part.device}", flush=True)


GATHERS = {"ResourceGather", "GatherV2"}
READS = {"ReadVariableOp", "Identity"}  # a value passed on whole, as a cached read (variables.py, `whole`)


def looked_up(variable):
    """Whether `variable` (any part of it) is read by rows in its graph: a gather of it, or of a read of it."""
    frontier = [part.handle for part in tf.nest.flatten(variable)]
    seen = set()
    while frontier:
        tensor = frontier.pop()
        for consumer in tensor.consumers():
            if consumer.type in GATHERS and consumer.inputs[0] is tensor:
                return True
            if consumer.type in READS and consumer.name not in seen:
                seen.add(consumer.name)
                frontier.extend(consumer.outputs)
    return False


def describe(params, kinds):
    """{variable: {"shape", "kind", "looked_up"}}: what a run's summary records of the variables (the report reads
    it); a dense variable looked up by rows is one also read whole, such as a tied embedding."""
    return {name: {"shape": list(spec.shape), "kind": kinds[name], "looked_up": looked_up(params.variables[name])}
            for name, spec in params.specs.items()}
