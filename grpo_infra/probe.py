"""A tiny stand-in for the verl trainer that proves the gang Ray cluster a scheduler formed.

Run as the job's entrypoint where the GPUs are placeholders and verl cannot run: the Slurm
sandbox's (`GRPO_ENTRYPOINT="python -m grpo_infra.probe ..."`), and a Kubernetes stack's RayJob or
`grpo-infra submit` when the stack sets `job.probe` (the local cluster's CPU image). It imports
nothing of this project but itself, so any image with Ray and grpo-infra runs it. It checks
that Ray sees every node of the allocation with its GPUs, places one bundle per node with
STRICT_SPREAD, runs a task in each bundle every step (on the same nodes every step, without retries,
as the ranks of one process group: a lost node fails the attempt), and writes numbered checkpoint steps in
verl's layout (`global_step_<k>/`, `latest_checkpointed_iteration.txt`) so that a requeued run
resumes after the last step the first run finished. Each event is one `PROBE {json}` line on
stdout for tests, the demo and the benchmark to read.

With `--role` (a disaggregated job: `--role trainer=2x8@a3-h100 --role rollout=2x4@g2-l4`) it places
each role as verl 0.9.1 does, not by a bundle per node: per role in order (the trainer first,
fully_async_main.py:77-84), per node of the role, one placement group of `gpus` bundles of one GPU each,
STRICT_PACK, asking for GPUs by count only (verl/single_controller/ray/base.py:146-158); then it reports
each rank's role, node and the pool that node advertises (`grpo_pool:<pool>`, the worker's
`rayStartParams.resources`), and fails when a rank landed off its role's pool.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import sys
import time
from pathlib import Path
from typing import Any, NamedTuple

LATEST = "latest_checkpointed_iteration.txt"
HEAD_RESOURCE = "node:__internal_head__"
# What a node of a disaggregated job advertises about its pool (grpo_infra/spec/layout.py POOL_RESOURCE_PREFIX;
# the probe imports nothing of the project, so the prefix is repeated here and a test holds the two equal).
POOL_RESOURCE_PREFIX = "grpo_pool:"


class Role(NamedTuple):
    """One role of a disaggregated job as `--role NAME=NODESxGPUS@POOL` gives it."""

    name: str
    nodes: int
    gpus_per_node: int
    pool: str


def role_arg(text: str) -> Role:
    """`trainer=2x8@a3-h100` -> Role("trainer", 2, 8, "a3-h100")."""
    try:
        name, rest = text.split("=", 1)
        shape, pool = rest.split("@", 1)
        nodes, gpus = shape.split("x", 1)
        role = Role(name, int(nodes), int(gpus), pool)
    except ValueError:
        raise argparse.ArgumentTypeError(f"--role {text!r}: expected NAME=NODESxGPUS@POOL") from None
    if not (role.name and role.pool) or role.nodes < 1 or role.gpus_per_node < 1:
        raise argparse.ArgumentTypeError(f"--role {text!r}: a name, a pool and at least 1 node and 1 GPU")
    return role


def node_pool(resources: dict[str, float]) -> str | None:
    """The pool a Ray node advertises, from its resources; None when it advertises none."""
    pools = [k.removeprefix(POOL_RESOURCE_PREFIX) for k in resources if k.startswith(POOL_RESOURCE_PREFIX)]
    return pools[0] if len(pools) == 1 else None


def unfit(nodes: list[dict[str, Any]], roles: list[Role]) -> str:
    """Why Ray's nodes cannot hold the roles, or "": each role needs its nodes, on its pool, each with the
    role's GPUs as Ray counts them (a worker whose Ray counted no GPU has none for verl either)."""
    for role in roles:
        found = [n for n in nodes if n["pool"] == role.pool]
        fit = [n for n in found if n["gpus"] >= role.gpus_per_node]
        if len(fit) < role.nodes:
            seen = ", ".join(f"{n['ip']} {n['gpus']}" for n in found) or "none"
            return (
                f"role {role.name} needs {role.nodes} node(s) of pool {role.pool} with {role.gpus_per_node} GPUs in "
                f"Ray; Ray's nodes of that pool (address, GPUs): {seen}"
            )
    return ""


def misplaced(ranks: list[dict[str, Any]], roles: list[Role]) -> list[str]:
    """One line per rank that runs on a node of another pool than its role's."""
    pool_of = {r.name: r.pool for r in roles}
    return [
        f"rank {r['rank']} of role {r['role']} ran on node {r['node']} of pool {r['pool']}, not {pool_of[r['role']]}"
        for r in ranks
        if r["pool"] != pool_of[r["role"]]
    ]


def emit(event: str, **fields: Any) -> None:
    print("PROBE " + json.dumps({"event": event, "time": time.time(), **fields}), flush=True)


def last_step(checkpoint_dir: Path) -> int:
    """The last completed step: verl's tracker file, else the highest `global_step_<k>` directory."""
    tracker = checkpoint_dir / LATEST
    if tracker.is_file():
        return int(tracker.read_text().strip() or 0)
    steps = [int(p.name.removeprefix("global_step_")) for p in checkpoint_dir.glob("global_step_*")]
    return max(steps, default=0)


def save_step(checkpoint_dir: Path, step: int, placement: list[dict[str, Any]]) -> None:
    """Write step `step`, then move the tracker: a crash in between leaves the previous step current."""
    target = checkpoint_dir / f"global_step_{step}"
    target.mkdir(parents=True, exist_ok=True)
    (target / "probe.json").write_text(json.dumps({"step": step, "placement": placement}) + "\n")
    tmp = checkpoint_dir / f".{LATEST}.{os.getpid()}"
    tmp.write_text(f"{step}\n")
    os.replace(tmp, checkpoint_dir / LATEST)


def where() -> dict[str, Any]:
    """Run inside a bundle: which node (hostname of its UTS namespace) and Ray node this task ran on."""
    import ray

    return {
        "node": socket.gethostname(),
        "ray_node_id": ray.get_runtime_context().get_node_id(),
        "gpu_ids": ray.get_gpu_ids(),
    }


def parse(argv: list[str] | None) -> argparse.Namespace:
    env = os.environ
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--address", default=env.get("RAY_ADDRESS"), help="Ray GCS address (default $RAY_ADDRESS).")
    parser.add_argument("--nodes", type=int, default=int(env.get("SLURM_JOB_NUM_NODES", "0")))
    parser.add_argument("--gpus-per-node", type=int, default=int(env.get("SLURM_GPUS_ON_NODE", "0")))
    parser.add_argument("--checkpoint-dir", type=Path, required=True)
    parser.add_argument("--steps", type=int, default=3, help="Total training steps of the run.")
    parser.add_argument("--step-seconds", type=float, default=0.0, help="Time each step takes.")
    parser.add_argument(
        "--role",
        dest="roles",
        type=role_arg,
        action="append",
        default=[],
        help="A disaggregated job's role, NAME=NODESxGPUS@POOL, in verl's order (trainer first); repeat per role. "
        "Replaces --nodes and --gpus-per-node.",
    )
    parser.add_argument(
        "--head-apart",
        action="store_true",
        help="The Ray head is a CPU node of its own, outside the allocation (a KubeRay head pod): not counted.",
    )
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    if not args.address:
        print("probe: no Ray address: set RAY_ADDRESS or pass --address", file=sys.stderr)
        return 2
    import ray
    from ray.util.placement_group import placement_group
    from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

    ray.init(address=args.address, logging_level="warning", log_to_driver=False)
    alive = [n for n in ray.nodes() if n["Alive"]]
    if args.head_apart:
        # Ray marks its head with this resource (ray 2.60.0 python/ray/_common/constants.py HEAD_NODE_RESOURCE_NAME).
        alive = [n for n in alive if HEAD_RESOURCE not in n["Resources"]]
    nodes = [
        {
            "ip": n["NodeManagerAddress"],
            "ray_node_id": n["NodeID"],
            "gpus": int(n["Resources"].get("GPU", 0)),
            "pool": node_pool(n["Resources"]),
        }
        for n in alive
    ]
    emit("nodes", nodes=nodes, count=len(nodes))
    if args.roles:
        return by_role(args, nodes)
    if args.nodes and len(nodes) != args.nodes:
        print(f"probe: Ray sees {len(nodes)} nodes, the allocation has {args.nodes}", file=sys.stderr)
        return 1
    short = [n for n in nodes if n["gpus"] != args.gpus_per_node]
    if short:
        print(f"probe: nodes without {args.gpus_per_node} GPUs: {short}", file=sys.stderr)
        return 1

    bundles = [{"CPU": 1, "GPU": args.gpus_per_node} if args.gpus_per_node else {"CPU": 1} for _ in nodes]
    group = placement_group(bundles, strategy="STRICT_SPREAD")
    ray.get(group.ready(), timeout=60)
    # No retries: a rank of an NCCL process group lost with its node is not re-run elsewhere, the whole
    # attempt fails (verl's does), and the scheduler restarts the gang; a retried task would hide that.
    remote = ray.remote(num_cpus=1, num_gpus=args.gpus_per_node, max_retries=0)(where)

    checkpoint_dir: Path = args.checkpoint_dir
    checkpoint_dir.mkdir(parents=True, exist_ok=True)
    start = last_step(checkpoint_dir)
    emit("resume" if start else "start", from_step=start, restart_count=int(os.environ.get("SLURM_RESTART_COUNT", 0)))
    for step in range(start + 1, args.steps + 1):
        refs = [
            remote.options(
                scheduling_strategy=PlacementGroupSchedulingStrategy(group, placement_group_bundle_index=i)
            ).remote()
            for i in range(len(bundles))
        ]
        placement = [{"bundle": i, **r} for i, r in enumerate(ray.get(refs, timeout=120))]
        if step == start + 1:
            emit("placement", bundles=placement)
            gang = [b["ray_node_id"] for b in placement]
        moved = [b for b in placement if b["ray_node_id"] != gang[b["bundle"]]]
        if moved:
            # Ray rescheduled a bundle onto a replacement node: a process group cannot take a new member.
            print(f"probe: rank {moved[0]['bundle']} moved to node {moved[0]['node']} at step {step}", file=sys.stderr)
            return 1
        time.sleep(args.step_seconds)
        save_step(checkpoint_dir, step, placement)
        emit("checkpoint", step=step)
    emit("done", steps=args.steps)
    return 0


def by_role(args: argparse.Namespace, nodes: list[dict[str, Any]]) -> int:
    """A disaggregated job's roles, placed as verl places them (module docstring), every rank checked
    against its role's pool every step."""
    import ray
    from ray.util.placement_group import placement_group
    from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

    roles: list[Role] = args.roles
    wanted = sum(r.nodes for r in roles)
    if len(nodes) != wanted:
        print(f"probe: Ray sees {len(nodes)} nodes, the roles hold {wanted}", file=sys.stderr)
        return 1
    # Per role and node, a STRICT_PACK group of one-GPU bundles, created role after role, each group
    # ready before the next is asked for (verl's RayResourcePool: base.py:146-158, `ray.get(pg.ready())`).
    # No CPU in the bundles: verl's fit a real node's CPUs, a stand-in node may have fewer CPUs than GPUs.
    slots: list[tuple[Role, Any, int]] = []
    for role in roles:
        for _ in range(role.nodes):
            group = placement_group([{"GPU": 1}] * role.gpus_per_node, strategy="STRICT_PACK")
            try:
                ray.get(group.ready(), timeout=60)
            except ray.exceptions.GetTimeoutError:
                # verl would wait for this group for ever (its `ray.get(pg.ready())` has no timeout): say why.
                why = unfit(nodes, roles) or f"role {role.name}'s {role.gpus_per_node}-GPU group not placed in 60 s"
                print(f"probe: FAIL {why}", file=sys.stderr)
                return 1
            slots += [(role, group, i) for i in range(role.gpus_per_node)]
    pool_of_node = {n["ray_node_id"]: n["pool"] for n in nodes}
    remote = ray.remote(num_cpus=0, num_gpus=1, max_retries=0)(where)

    checkpoint_dir: Path = args.checkpoint_dir
    checkpoint_dir.mkdir(parents=True, exist_ok=True)
    start = last_step(checkpoint_dir)
    emit("resume" if start else "start", from_step=start, restart_count=int(os.environ.get("SLURM_RESTART_COUNT", 0)))
    for step in range(start + 1, args.steps + 1):
        refs = [
            remote.options(
                scheduling_strategy=PlacementGroupSchedulingStrategy(group, placement_group_bundle_index=i)
            ).remote()
            for _, group, i in slots
        ]
        ranks = [
            {"rank": rank, "role": role.name, **found, "pool": pool_of_node.get(found["ray_node_id"])}
            for rank, ((role, _, _), found) in enumerate(zip(slots, ray.get(refs, timeout=120), strict=True))
        ]
        if step == start + 1:
            emit("placement", ranks=ranks)
            gang = [r["ray_node_id"] for r in ranks]
        wrong = misplaced(ranks, roles)
        if wrong:
            print(f"probe: {wrong[0]}" + (f" (and {len(wrong) - 1} more)" if len(wrong) > 1 else ""), file=sys.stderr)
            return 1
        moved = [r for r in ranks if r["ray_node_id"] != gang[r["rank"]]]
        if moved:
            print(f"probe: rank {moved[0]['rank']} moved to node {moved[0]['node']} at step {step}", file=sys.stderr)
            return 1
        time.sleep(args.step_seconds)
        save_step(checkpoint_dir, step, ranks)
        emit("checkpoint", step=step)
    emit("done", steps=args.steps)
    return 0


if __name__ == "__main__":
    sys.exit(main())
