"""The fabric gate inside the job: a timed all-reduce over every GPU of the Ray cluster, then the verdict.

Run on a node of a running Ray cluster, before training::

    python -m grpo_infra.preflight.ray_allreduce --fabric infiniband --gpus-per-node 8 --nodes 2

One placement group, STRICT_SPREAD, one bundle per node holding that node's GPUs, so the gate
covers exactly the gang verl will use. With ``--backend nccl`` there is one rank per GPU, each
on its own GPU with ``NCCL_DEBUG=INFO`` written to a file the rank hands back; NCCL's own log then
says which transport every rank used. With ``--backend gloo`` there is one rank per node, holding
the node's GPU slot but all-reducing CPU tensors over TCP: the check that runs where Ray advertises
GPUs but no CUDA exists (the local Slurm sandbox). Bus bandwidth is computed as nccl-tests does
(``busbw = algbw x busbw_factor``) and judged by :func:`judge`, the same verdict as for nccl-tests
output. Exit 0 pass, 1 fail, 2 when the gate cannot run (bad option, no Ray cluster).

Every wait is bounded by ``--timeout``; a watchdog ends the process shortly after it regardless.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .defaults import DEFAULT_BACKEND, DEFAULT_ITERATIONS, DEFAULT_SIZE_MIB, DEFAULT_TIMEOUT_S
from .nccl_log import parse_nccl_log
from .nccl_tests import busbw_factor
from .verdict import DEFAULT_FRACTION, GATE_FABRICS, Verdict, default_expected_busbw, judge

BACKENDS = ("nccl", "gloo")
# The gate's defaults, here once: the spec's `job.preflight.nccl` and this program's options use them.
WARMUP_ITERATIONS = 5
FLOAT32_BYTES = 4
# Grace after --timeout before the watchdog ends the process, for cleanup of actors and the group.
WATCHDOG_GRACE_SECONDS = 30


class AllReduceRank:
    """One rank of the gate, run as a Ray actor.

    Uses only the standard library and torch: it is shipped to the workers by value, so nodes
    need torch but not this package.
    """

    def where(self) -> dict[str, Any]:
        import socket

        import ray

        ctx = ray.get_runtime_context()
        return {
            "node_ip": ray.util.get_node_ip_address(),
            "node_id": ctx.get_node_id(),
            "host": socket.gethostname().split(".")[0],
            "pid": os.getpid(),
        }

    def free_port(self, ip: str) -> int:
        """A port free on this node's address, for the rendezvous that rank 0 hosts."""
        import socket

        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.bind((ip, 0))
            return int(sock.getsockname()[1])

    def run(
        self,
        rank: int,
        world_size: int,
        master_addr: str,
        master_port: int,
        backend: str,
        numel: int,
        warmup: int,
        iterations: int,
        timeout_seconds: float,
    ) -> dict[str, Any]:
        """Warm up, time `iterations` all-reduces of `numel` float32, check one result, return the timing."""
        import datetime
        import shutil
        import tempfile
        import warnings

        # The CPU build of torch warns when numpy is absent; the gate needs no numpy.
        warnings.filterwarnings("ignore", message="Failed to initialize NumPy")
        import torch
        import torch.distributed as dist

        log_dir = tempfile.mkdtemp(prefix="grpo-nccl-gate-")
        log_path = os.path.join(log_dir, "nccl.log")
        try:
            if backend == "nccl":
                if not torch.cuda.is_available():
                    raise RuntimeError(
                        f"rank {rank}: no CUDA device visible (torch {torch.__version__}); "
                        "on nodes without CUDA use --backend gloo"
                    )
                os.environ["NCCL_DEBUG"] = "INFO"
                os.environ.setdefault("NCCL_DEBUG_SUBSYS", "INIT,NET")
                os.environ["NCCL_DEBUG_FILE"] = log_path
                torch.cuda.set_device(0)  # Ray made this rank's one GPU the only visible one
                device = torch.device("cuda", 0)
            else:
                _use_ray_interface_for_gloo()
                device = torch.device("cpu")
            dist.init_process_group(
                backend,
                init_method=f"tcp://{master_addr}:{master_port}",
                rank=rank,
                world_size=world_size,
                timeout=datetime.timedelta(seconds=timeout_seconds),
            )

            def sync() -> None:
                if device.type == "cuda":
                    torch.cuda.synchronize()

            try:
                # Zeros stay zeros however often they are summed: no overflow to inf over long runs.
                tensor = torch.zeros(numel, dtype=torch.float32, device=device)
                for _ in range(warmup):
                    dist.all_reduce(tensor)
                sync()
                dist.barrier()
                started = time.perf_counter()
                for _ in range(iterations):
                    dist.all_reduce(tensor)
                sync()
                seconds = (time.perf_counter() - started) / iterations
                check = torch.ones(4, dtype=torch.float32, device=device)
                dist.all_reduce(check)
                got = float(check.sum().item()) / 4
            finally:
                dist.destroy_process_group()
            log_text = Path(log_path).read_text(errors="replace") if os.path.exists(log_path) else ""
            return {"rank": rank, "seconds": seconds, "check": got, "nccl_log": log_text}
        finally:
            shutil.rmtree(log_dir, ignore_errors=True)


def _use_ray_interface_for_gloo() -> None:
    """Point gloo at the interface carrying Ray's node address, unless GLOO_SOCKET_IFNAME is set.

    gloo otherwise resolves the hostname, which on multi-homed or namespaced nodes may name an
    address other ranks cannot reach.
    """
    if os.environ.get("GLOO_SOCKET_IFNAME"):
        return
    import socket

    import ray

    try:
        import psutil
    except ImportError:
        return
    ip = ray.util.get_node_ip_address()
    for name, addrs in psutil.net_if_addrs().items():
        if any(a.family == socket.AF_INET and a.address == ip for a in addrs):
            os.environ["GLOO_SOCKET_IFNAME"] = name
            return


@dataclass
class GateResult:
    """What the all-reduce measured, and the verdict on it (GB/s, microseconds)."""

    verdict: Verdict
    backend: str
    ranks: int = 0
    nodes_seen: int = 0
    size_bytes: int = 0
    iterations: int = 0
    time_us: float | None = None
    algbw_gbps: float | None = None
    busbw_gbps: float | None = None
    busbw_factor: float | None = None
    rank_transports: dict[str, str | None] = field(default_factory=dict)
    placement: list[dict[str, Any]] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return {
            **self.verdict.as_dict(),
            "backend": self.backend,
            "ranks": self.ranks,
            "nodes_seen": self.nodes_seen,
            "size_bytes": self.size_bytes,
            "iterations": self.iterations,
            "time_us": self.time_us,
            "algbw_gbps": self.algbw_gbps,
            "busbw_gbps": self.busbw_gbps,
            "busbw_factor": self.busbw_factor,
            "rank_transports": self.rank_transports,
            "placement": self.placement,
        }

    def summary(self) -> str:
        """The one-line verdict, then one line per failure reason and note."""
        v = self.verdict
        lines = [
            f"{'PASS' if v.passed else 'FAIL'} fabric={v.fabric} backend={self.backend} "
            f"transport={v.transport or '-'} ranks={self.ranks} nodes={self.nodes_seen} "
            f"size={self.size_bytes / 2**20:g} MiB time={_fmt(self.time_us)} us "
            f"algbw={_fmt(self.algbw_gbps)} GB/s busbw={_fmt(self.busbw_gbps)} GB/s "
            f"{v.threshold_text}"
        ]
        lines += [f"  fail: {r}" for r in v.reasons]
        lines += [f"  note: {n}" for n in v.notes]
        return "\n".join(lines)


def _fmt(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}"


@dataclass(frozen=True)
class GateOptions:
    fabric: str
    gpus_per_node: int
    nodes: int
    expected_busbw_gbps: float | None = None
    fraction: float = DEFAULT_FRACTION
    backend: str = DEFAULT_BACKEND
    size_mib: float = DEFAULT_SIZE_MIB
    iterations: int = DEFAULT_ITERATIONS
    warmup: int = WARMUP_ITERATIONS
    timeout_seconds: float = DEFAULT_TIMEOUT_S

    @property
    def ranks_per_node(self) -> int:
        """nccl: one rank per GPU; gloo: one CPU rank per node, holding the node's GPU slot."""
        return self.gpus_per_node if self.backend == "nccl" else 1

    @property
    def expected(self) -> float | None:
        """Given, else the fabric's default for the gang's real GPUs per node (also when gloo runs one rank per node)."""
        if self.expected_busbw_gbps is not None:
            return self.expected_busbw_gbps
        return default_expected_busbw(self.fabric, self.gpus_per_node, self.nodes)

    @property
    def numel(self) -> int:
        return max(1, int(self.size_mib * 2**20) // FLOAT32_BYTES)


def _failed(options: GateOptions, reason: str, **measured: Any) -> GateResult:
    """A run that could not measure anything: the gate fails with the reason."""
    verdict = judge(
        fabric=options.fabric,
        gpus_per_node=options.gpus_per_node,
        nodes=options.nodes,
        peak_busbw_gbps=None,
        rank_transports={},
        problems=[reason],
        expected_busbw_gbps=options.expected,
        fraction=options.fraction,
    )
    return GateResult(verdict=verdict, backend=options.backend, **measured)


def run_gate(options: GateOptions) -> GateResult:
    """Place the ranks, run the all-reduce, judge it. Needs a connected Ray driver (`ray.init`)."""
    import ray
    from ray.exceptions import GetTimeoutError, RayActorError, RayTaskError
    from ray.util.placement_group import placement_group, remove_placement_group
    from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

    deadline = time.monotonic() + options.timeout_seconds

    def remaining() -> float:
        return max(1.0, deadline - time.monotonic())

    if __name__ != "__main__":
        # Ship the rank class by value: workers then need torch, not this package.
        ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])

    per_node = options.ranks_per_node
    world = per_node * options.nodes
    bundles = [{"GPU": float(options.gpus_per_node)} for _ in range(options.nodes)]
    group = placement_group(bundles, strategy="STRICT_SPREAD", name="grpo-fabric-gate")
    actors: list[Any] = []
    try:
        if not group.wait(timeout_seconds=remaining()):
            return _failed(
                options,
                f"Ray could not place {options.nodes} node(s) x {options.gpus_per_node} GPU(s) "
                f"(STRICT_SPREAD) within {options.timeout_seconds:g} s: {_gpu_nodes_seen(ray)}",
            )
        rank_cls = ray.remote(AllReduceRank)
        gpus_per_rank = 1.0 if options.backend == "nccl" else float(options.gpus_per_node)
        for node_index in range(options.nodes):
            strategy = PlacementGroupSchedulingStrategy(group, placement_group_bundle_index=node_index)
            for _ in range(per_node):
                actors.append(
                    rank_cls.options(num_cpus=0, num_gpus=gpus_per_rank, scheduling_strategy=strategy).remote()
                )
        placement = ray.get([a.where.remote() for a in actors], timeout=remaining())
        for rank, where in enumerate(placement):
            where["rank"] = rank
        master_addr = placement[0]["node_ip"]
        master_port = ray.get(actors[0].free_port.remote(master_addr), timeout=remaining())
        runs = ray.get(
            [
                actor.run.remote(
                    rank,
                    world,
                    master_addr,
                    master_port,
                    options.backend,
                    options.numel,
                    options.warmup,
                    options.iterations,
                    remaining(),
                )
                for rank, actor in enumerate(actors)
            ],
            timeout=remaining(),
        )
    except GetTimeoutError:
        return _failed(options, f"the all-reduce did not finish within {options.timeout_seconds:g} s", ranks=world)
    except (RayTaskError, RayActorError) as exc:
        cause = str(getattr(exc, "cause", None) or exc).strip().splitlines()
        return _failed(options, f"a rank failed: {cause[-1] if cause else type(exc).__name__}", ranks=world)
    finally:
        for actor in actors:
            ray.kill(actor)
        remove_placement_group(group)
    return _judge_runs(options, placement, runs)


def _gpu_nodes_seen(ray: Any) -> str:
    nodes = [n for n in ray.nodes() if n.get("Alive")]
    gpus = [int(n["Resources"].get("GPU", 0)) for n in nodes]
    return f"the cluster has {len(nodes)} alive node(s) with GPUs {gpus}"


def _judge_runs(options: GateOptions, placement: list[dict[str, Any]], runs: list[dict[str, Any]]) -> GateResult:
    world = len(runs)
    size_bytes = options.numel * FLOAT32_BYTES
    seconds = max(r["seconds"] for r in runs)  # the slowest rank bounds the collective
    factor = busbw_factor("all_reduce", world)
    algbw = size_bytes / seconds / 1e9
    busbw = algbw * factor
    problems = [
        f"rank {r['rank']}: all-reduce of ones returned {r['check']:g}, expected {world}"
        for r in runs
        if r["check"] != world
    ]
    notes: list[str] = []
    transports: dict[str, str | None] = {}
    warn_only = False
    if options.backend == "gloo":
        for where in placement:
            label = f"rank {where['rank']} ({where['host']} node {where['node_id'][:8]} pid {where['pid']})"
            transports[label] = "socket"
        notes.append("backend gloo: CPU tensors over TCP sockets, one rank per node; the GPUs' fabric is not used")
    else:
        log = parse_nccl_log("\n".join(r["nccl_log"] for r in runs))
        if log is None:
            notes.append("NCCL wrote no INFO lines: transport not checked")
        else:
            transports = {proc.label: proc.transport for proc in log.processes}
            problems += [p for p in log.problems if "fell back to sockets" not in p]
            warn_only = log.warn_only
    nodes_seen = len({where["node_id"] for where in placement})
    verdict = judge(
        fabric=options.fabric,
        gpus_per_node=options.ranks_per_node,
        nodes=options.nodes,
        peak_busbw_gbps=round(busbw, 2),
        rank_transports=transports,
        problems=problems,
        ranks_seen=world,
        hosts_seen=nodes_seen,
        expected_busbw_gbps=options.expected,
        fraction=options.fraction,
        warn_only=warn_only,
    )
    verdict.notes[:0] = notes
    return GateResult(
        verdict=verdict,
        backend=options.backend,
        ranks=world,
        nodes_seen=nodes_seen,
        size_bytes=size_bytes,
        iterations=options.iterations,
        time_us=round(seconds * 1e6, 2),
        algbw_gbps=round(algbw, 2),
        busbw_gbps=round(busbw, 2),
        busbw_factor=factor,
        rank_transports=transports,
        placement=placement,
    )


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m grpo_infra.preflight.ray_allreduce",
        description="Timed all-reduce over every GPU of the running Ray cluster, judged against the fabric. "
        "Exit 0 pass, 1 fail, 2 when the gate cannot run.",
    )
    p.add_argument("--fabric", required=True, choices=GATE_FABRICS, help="the pool's fabric kind")
    p.add_argument("--gpus-per-node", type=int, required=True, help="GPUs per node of the gang")
    p.add_argument("--nodes", type=int, required=True, help="nodes of the gang")
    p.add_argument("--expected-busbw", type=float, default=None, help="expected all-reduce busbw, GB/s")
    p.add_argument("--fraction", type=float, default=DEFAULT_FRACTION, help="fail under fraction x expected")
    p.add_argument("--backend", choices=BACKENDS, default=DEFAULT_BACKEND, help="nccl on GPUs, gloo on CPU tensors")
    p.add_argument("--size-mib", type=float, default=DEFAULT_SIZE_MIB, help="all-reduce size, MiB (float32)")
    p.add_argument("--iters", type=int, default=DEFAULT_ITERATIONS, help="timed all-reduces")
    p.add_argument("--warmup", type=int, default=WARMUP_ITERATIONS, help="untimed all-reduces first")
    p.add_argument("--timeout", type=float, default=DEFAULT_TIMEOUT_S, help="bound on the whole gate, seconds")
    p.add_argument("--address", default="auto", help="Ray cluster address (default: the one this node runs)")
    p.add_argument("--json-out", type=Path, default=None, help="write the measurements and verdict here")
    return p


def _options(args: argparse.Namespace) -> GateOptions:
    problems = []
    if args.gpus_per_node < 1 or args.nodes < 1:
        problems.append("--gpus-per-node and --nodes must be at least 1")
    if not 0 < args.fraction <= 1:
        problems.append(f"--fraction must be in (0, 1], got {args.fraction:g}")
    if args.expected_busbw is not None and args.expected_busbw <= 0:
        problems.append("--expected-busbw must be positive (GB/s)")
    if args.size_mib <= 0 or args.iters < 1 or args.warmup < 0 or args.timeout <= 0:
        problems.append("--size-mib, --iters and --timeout must be positive, --warmup at least 0")
    if problems:
        raise ValueError("; ".join(problems))
    return GateOptions(
        fabric=args.fabric,
        gpus_per_node=args.gpus_per_node,
        nodes=args.nodes,
        expected_busbw_gbps=args.expected_busbw,
        fraction=args.fraction,
        backend=args.backend,
        size_mib=args.size_mib,
        iterations=args.iters,
        warmup=args.warmup,
        timeout_seconds=args.timeout,
    )


def main(argv: Sequence[str] | None = None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    try:
        options = _options(args)
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2

    def give_up() -> None:
        print(f"FAIL fabric={options.fabric} backend={options.backend}: the gate did not end within "
              f"{options.timeout_seconds:g} s (+{WATCHDOG_GRACE_SECONDS} s grace)", flush=True)  # fmt: skip
        os._exit(1)

    watchdog = threading.Timer(options.timeout_seconds + WATCHDOG_GRACE_SECONDS, give_up)
    watchdog.daemon = True
    watchdog.start()
    try:
        import ray
    except ImportError:
        print("error: ray is not installed in this Python (pip install 'grpo-infra[sandbox]')", file=sys.stderr)
        return 2
    connected_here = not ray.is_initialized()
    try:
        if connected_here:
            ray.init(address=args.address, log_to_driver=False, logging_level=logging.WARNING)
    except (ConnectionError, RuntimeError, ValueError) as exc:
        print(f"error: no Ray cluster at {args.address!r}: {exc}", file=sys.stderr)
        return 2
    try:
        result = run_gate(options)
    finally:
        if connected_here:
            ray.shutdown()
        watchdog.cancel()
    print(result.summary(), flush=True)
    if args.json_out is not None:
        args.json_out.write_text(json.dumps(result.as_dict(), indent=2) + "\n")
    return 0 if result.verdict.passed else 1


if __name__ == "__main__":
    sys.exit(main())
