"""The Ray port block of a job: which ports one job's Ray cluster binds, derived from its job id.

Jobs that share a node must never bind the same port (two Ray clusters with one port block break
each other: a head reaches the other job's GCS). The stack gives a port range; it is cut into
blocks of `BLOCK_SIZE` ports and a job takes block `job_id mod blocks`. Two jobs whose ids differ
by less than the number of blocks therefore never collide. The sbatch script computes the same
arithmetic in shell from `SLURM_JOB_ID`, rendered from the constants below, so there is one source.
"""

from __future__ import annotations

from dataclasses import dataclass

# Ports per job: the fixed ports first, then the workers' range up to the end of the block.
BLOCK_SIZE = 256
# Offset of each fixed port inside a block, by the `ray start` option that takes it.
FIXED_OFFSETS: dict[str, int] = {
    "gcs": 0,  # --port (head only)
    "dashboard": 1,  # --dashboard-port (head only)
    "client": 2,  # --ray-client-server-port (head only)
    "node_manager": 3,  # --node-manager-port
    "object_manager": 4,  # --object-manager-port
    "runtime_env_agent": 5,  # --runtime-env-agent-port
    "dashboard_agent_grpc": 6,  # --dashboard-agent-grpc-port
    "dashboard_agent_http": 7,  # --dashboard-agent-listen-port
    "metrics_export": 8,  # --metrics-export-port
    # Head only, no `ray start` option: Prometheus servers on fixed ports of their own unless these
    # variables say otherwise (AUTOSCALER_METRIC_PORT=44217, ray/autoscaler/_private/constants.py;
    # DASHBOARD_METRIC_PORT=44227, ray/dashboard/consts.py; Ray 2.60), set by the lifecycle's ray_start_args.
    "autoscaler_metrics": 9,  # AUTOSCALER_METRIC_PORT
    "dashboard_metrics": 10,  # DASHBOARD_METRIC_PORT
    # Head only, not Ray's: the Slurm run's stop order, open while the batch script stops the job's Ray
    # (grpo_infra/lifecycle/stop_order.py).
    "stop_order": 11,
}
# Worker processes take one port each from [WORKER_OFFSET, BLOCK_SIZE - 1] of the block.
WORKER_OFFSET = 16


@dataclass(frozen=True)
class RayPorts:
    """Every port one job's Ray binds on each of its nodes."""

    gcs: int
    dashboard: int
    client: int
    node_manager: int
    object_manager: int
    runtime_env_agent: int
    dashboard_agent_grpc: int
    dashboard_agent_http: int
    metrics_export: int
    autoscaler_metrics: int
    dashboard_metrics: int
    stop_order: int
    min_worker: int
    max_worker: int

    def all(self) -> set[int]:
        """Every port of the block this job may bind."""
        fixed = {getattr(self, name) for name in FIXED_OFFSETS}
        return fixed | set(range(self.min_worker, self.max_worker + 1))


def block_count(start: int, end: int) -> int:
    """How many whole blocks the inclusive range [start, end] holds."""
    return (end - start + 1) // BLOCK_SIZE


def ray_ports(start: int, end: int, job_id: int) -> RayPorts:
    """The port block of job `job_id` inside the inclusive range [start, end]."""
    blocks = block_count(start, end)
    if blocks < 1:
        raise ValueError(f"the Ray port range {start}-{end} is smaller than one block of {BLOCK_SIZE} ports")
    if job_id < 0:
        raise ValueError(f"a job id is not negative: {job_id}")
    base = start + (job_id % blocks) * BLOCK_SIZE
    fixed = {name: base + offset for name, offset in FIXED_OFFSETS.items()}
    return RayPorts(**fixed, min_worker=base + WORKER_OFFSET, max_worker=base + BLOCK_SIZE - 1)


# Ports of a block left for Ray's worker processes.
WORKER_PORTS = BLOCK_SIZE - WORKER_OFFSET
# verl's actors on a node beyond one per GPU (the trainer's driver-side actors, the rollout's manager): a margin.
VERL_ACTORS_PER_NODE = 8


def worker_ports_needed(cpus: int, gpus: int) -> int:
    """Worker ports one node's Ray may hold at once: Ray keeps up to one idle worker per CPU
    (`num_workers_soft_limit`, default -1 = the node's CPUs: src/ray/common/ray_config_def.h, Ray 2.60),
    each on its own port, plus verl's actors: one per GPU and a few per node."""
    return cpus + gpus + VERL_ACTORS_PER_NODE
