"""How one replica of a model is laid out: over how many nodes, and how the engine splits it.

A model that does not fit one node runs as a group of pods started together (one per
node): a leader that serves the API and `nodes - 1` workers. The engine splits the model
over every device of the group, so the group's devices and the engine's parallel sizes
must agree exactly; both engines require it:

- vLLM: one rank per GPU; a replica's world is tensorParallelSize x pipelineParallelSize
  ranks, and `--data-parallel-size` runs that many such worlds side by side
  (docs.vllm.ai, "Parallelism and Scaling": the usual multi-node layout is tensor parallel
  = GPUs per node, pipeline parallel = nodes; "Data Parallel Deployment"). With
  `--enable-expert-parallel` the experts of a MoE layer are spread over
  tensorParallelSize x dataParallelSize ranks instead of being tensor-split.
- MindFormers: `parallel_config` data_parallel x model_parallel x pipeline_stage must equal
  the devices msrun starts (`worker_num`), and expert_parallel must divide data_parallel.

A device left over would sit idle while counted as the model's, and a device missing makes
the engine refuse to start after every node was reserved: either is refused at admission.
Everything here is part of the revision: it changes how the numbers are computed (the
order of reductions across ranks), so a new layout is a canary, checked like any other.
"""

from __future__ import annotations

from pydantic import Field

from infergate.api.base import KubeModel
from infergate.api.enums import EngineKind

NODES_MAX = 64
PARALLEL_MAX = 64
# One pod holds one node's devices (as api.engine.SIZE_PER_POD_MAX).
ACCELERATORS_PER_NODE_MAX = 16


class Topology(KubeModel):
    """Nodes per replica and the engine's parallel layout over them; part of the revision.

    Unset (or nodes 1 with every size 1): one pod per replica, as a Deployment.
    """

    nodes: int = Field(default=1, ge=1, le=NODES_MAX)
    """Pods (one per node) that serve one replica together: a leader, which serves the API,
    and nodes - 1 workers, placed, started and restarted as one LeaderWorkerSet group. 1: a
    single pod per replica (a Deployment)."""
    accelerators_per_node: int | None = Field(default=None, ge=1, le=ACCELERATORS_PER_NODE_MAX)
    """Devices each pod of the group requests (one node's worth, e.g. 8). Required when nodes
    is above 1; then nodes x acceleratorsPerNode must equal accelerator.count x
    engine.tensorParallelSize x pipelineParallelSize x dataParallelSize: every device of the
    group holds a rank. Unset with one node: accelerator.count x the parallel sizes."""
    pipeline_parallel_size: int = Field(default=1, ge=1, le=PARALLEL_MAX)
    """Pipeline stages a replica's layers are split into (vLLM --pipeline-parallel-size,
    MindFormers pipeline_stage); the model needs at least this many layers. The tensor
    parallel size is engine.tensorParallelSize."""
    data_parallel_size: int = Field(default=1, ge=1, le=PARALLEL_MAX)
    """Copies of the tensor x pipeline world inside one replica (vLLM --data-parallel-size,
    MindFormers data_parallel), mostly with expertParallel for MoE models."""
    expert_parallel: bool = False
    """Spread the experts of MoE layers over ranks instead of splitting each expert: vLLM
    --enable-expert-parallel (experts over tensorParallelSize x dataParallelSize ranks),
    MindFormers expert_parallel = dataParallelSize. Needs more than one such rank."""

    @property
    def multi_node(self) -> bool:
        """Whether a replica is a group of pods (a LeaderWorkerSet) rather than one pod."""
        return self.nodes > 1

    def world(self, accelerator_count: int, tensor_parallel_size: int) -> int:
        """Devices the engine uses for one replica."""
        return (
            accelerator_count
            * tensor_parallel_size
            * self.pipeline_parallel_size
            * self.data_parallel_size
        )

    def devices_per_pod(self, accelerator_count: int, tensor_parallel_size: int) -> int:
        """Devices each pod of a replica requests."""
        if self.accelerators_per_node is not None:
            return self.accelerators_per_node
        return self.world(accelerator_count, tensor_parallel_size)


DEFAULT_TOPOLOGY = Topology()


def expert_ranks(engine: EngineKind, topology: Topology, tensor_parallel_size: int) -> int:
    """Ranks the experts are spread over with expertParallel (see the module doc)."""
    if engine is EngineKind.VLLM:
        return tensor_parallel_size * topology.data_parallel_size
    return topology.data_parallel_size


def topology_problem(
    topology: Topology,
    *,
    engine: EngineKind,
    accelerator_count: int,
    tensor_parallel_size: int,
) -> str | None:
    """Why `topology` cannot run (naming the fields and what is allowed), or None.

    The same rules as the CRD's CEL (`topology_rules`): a disagreement shows in the
    admission agreement test.
    """
    world = topology.world(accelerator_count, tensor_parallel_size)
    per_node = topology.accelerators_per_node
    if topology.multi_node and per_node is None:
        return (
            f"topology.acceleratorsPerNode is required when topology.nodes is above 1 "
            f"(nodes is {topology.nodes}): each pod of the group requests that many devices"
        )
    if per_node is not None and world != topology.nodes * per_node:
        return (
            f"topology: nodes x acceleratorsPerNode is {topology.nodes * per_node} devices but "
            f"accelerator.count x engine.tensorParallelSize x pipelineParallelSize x "
            f"dataParallelSize is {world}; they must be equal: every device of the group "
            "holds one rank"
        )
    if per_node is None and world > ACCELERATORS_PER_NODE_MAX:
        return (
            f"topology: accelerator.count x engine.tensorParallelSize x pipelineParallelSize x "
            f"dataParallelSize is {world}; at most {ACCELERATORS_PER_NODE_MAX} devices fit one "
            "pod: set topology.nodes and topology.acceleratorsPerNode"
        )
    if topology.expert_parallel and expert_ranks(engine, topology, tensor_parallel_size) < 2:
        return (
            "topology.expertParallel needs more than one rank to spread experts over: "
            "tensorParallelSize x dataParallelSize above 1 for vllm, dataParallelSize above 1 "
            "for mindformers"
        )
    return None
