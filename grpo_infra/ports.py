"""The Ray port block of a job: which ports one job's Ray cluster binds, derived from its job id.

Jobs that share a node must never bind the same port (two Ray clusters with one port block break
each other: a head reaches the other job's GCS). The stack gives a port range; it is cut into
blocks of `block_size(cpus, gpus)` ports, sized from the pool's nodes, and a job takes block
`job_id mod blocks`. Two jobs whose ids differ by less than the number of blocks therefore never
collide. The sbatch script computes the same arithmetic in shell from `SLURM_JOB_ID`, rendered from
the constants below, so there is one source.
"""

from __future__ import annotations

from dataclasses import dataclass

# Ports per job: the fixed ports first, then the workers' range up to the end of the block. A block is
# at least MIN_BLOCK_SIZE ports and grows in steps of BLOCK_STEP with the node's CPUs (`block_size`).
MIN_BLOCK_SIZE = 256
BLOCK_STEP = 64
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
# Worker processes take one port each from [WORKER_OFFSET, size - 1] of the block.
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


def block_count(start: int, end: int, size: int) -> int:
    """How many whole blocks of `size` ports the inclusive range [start, end] holds."""
    return (end - start + 1) // size


def ray_ports(start: int, end: int, job_id: int, size: int) -> RayPorts:
    """The port block of job `job_id` inside the inclusive range [start, end], blocks of `size` ports."""
    blocks = block_count(start, end, size)
    if blocks < 1:
        raise ValueError(f"the Ray port range {start}-{end} is smaller than one block of {size} ports")
    if job_id < 0:
        raise ValueError(f"a job id is not negative: {job_id}")
    base = start + (job_id % blocks) * size
    fixed = {name: base + offset for name, offset in FIXED_OFFSETS.items()}
    return RayPorts(**fixed, min_worker=base + WORKER_OFFSET, max_worker=base + size - 1)


# What holds a worker port besides the idle and busy workers of the node's CPUs. Every worker process
# takes one port of --min-worker-port..--max-worker-port when it registers with the raylet and gives it
# back when it exits, and so does every driver (WorkerPool::RegisterWorker and RegisterDriver call
# GetNextFreePort, src/ray/raylet/worker_pool.cc; the raylet of Ray 2.60 carries its "No available ports.
# Please specify a wider port range using --min-worker-port and --max-worker-port." error). Workers:
# - one per CPU: at the first driver the raylet starts --num_prestart_python_workers = the node's CPUs
#   (start_raylet, ray/_private/services.py line 2020, Ray 2.60) and keeps up to num_workers_soft_limit
#   of them idle (default -1 = the node's CPUs, src/ray/common/ray_config_def.h); tasks of one CPU each
#   run at most one per CPU. The soft limit trims idle workers only ("the total number of workers used
#   depends on the application"): no Ray setting caps the total, so the block is sized instead.
# - verl's actors beyond that: one per GPU and a few per node (the trainer's driver-side actors, the
#   rollout's manager), which may hold no CPU:
VERL_ACTORS_PER_NODE = 8
# - the object spilling's I/O workers: up to max_io_workers (4, ray_config_def.h) spill workers and as many
#   restore workers, each pool on its own (spill_io_worker_state, restore_io_worker_state in
#   src/ray/raylet/worker_pool.h);
IO_WORKERS_PER_NODE = 2 * 4
# - drivers on the node: verl's driver, the readiness barrier and fabric gate, a Jobs API submission's
#   driver, a person's `ray` attached to the job.
DRIVERS_PER_NODE = 4


def worker_ports_needed(cpus: int, gpus: int) -> int:
    """Worker ports one node's Ray may hold at once with `cpus` CPUs and `gpus` GPUs (the reasons above)."""
    return cpus + gpus + VERL_ACTORS_PER_NODE + IO_WORKERS_PER_NODE + DRIVERS_PER_NODE


def block_size(cpus: int, gpus: int) -> int:
    """Ports of one job's block on nodes of `cpus` CPUs and `gpus` GPUs: the fixed ports, then a worker
    port for each process `worker_ports_needed` counts; at least MIN_BLOCK_SIZE, in steps of BLOCK_STEP."""
    needed = WORKER_OFFSET + worker_ports_needed(cpus, gpus)
    return max(MIN_BLOCK_SIZE, -(-needed // BLOCK_STEP) * BLOCK_STEP)
