"""A rehearsal run: the plan's stack on the local Kubernetes with real nodes, through the real Pulumi engine.

The order is the README's: the stack's CPU image built (`grpo-infra image build`), `grpo-infra kube up`
with real nodes shaped like the stack's pools and the operators from their charts, `grpo-infra up --wait`
(here with each pool's CPU and memory scaled, scale.py; the operators checked as their charts made them,
operators.py; the run followed and the docs' steps done as the tenant, tenant.py; the job's NetworkPolicy
tried from other namespaces once it runs, reach.py), `grpo-infra destroy` (nothing of the stack left but
what Helm keeps, operators.py), `grpo-infra kube down`.
The rehearsal's stack file is written to a directory of its own; the project's are never touched.
"""

from __future__ import annotations

import functools
import os
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml

from .. import engine, job_wait
from ..kube import cluster, images, nodeimages
from ..kube.plan import Paths
from ..spec import ENVIRONMENT_KEY, PROJECT
from ..spec.load import lock_source
from . import drills, kinds, node_drills, operators, reach, tenant
from .plan import HOST_ROOT, Rehearsal
from .scale import Factor, scale_object

THROWAWAY = "rehearsal-throwaway-value"
# The rehearsal's nodes are all it will get (no autoscaler): a pod unplaced this long never will be; its
# volumes are directories of this machine (no attach): one that has not mounted by then never will.
UNSCHEDULABLE_S = 60
Say = Callable[[str], None]


def stack_file(rehearsal: Rehearsal) -> dict[str, Any]:
    """The rehearsal's stack file: its environment and no node pools to create (its secrets are set as
    secrets on the stack, `secret_settings`, never written here)."""
    env = rehearsal.env.model_dump(by_alias=True, exclude_none=True, mode="json")
    build = env.get("image", {}).get("build")
    if build:
        build.pop("lock", None)  # read from stacks/locks/, as for any stack
    return {"config": {ENVIRONMENT_KEY: env, f"{PROJECT}:nodesExist": "true"}}


def secret_settings(rehearsal: Rehearsal) -> dict[str, str]:
    """Each secret the job reads, with a throwaway value: set on the stack as a secret (`secure:`)."""
    return {f"{PROJECT}:{secret.config}": THROWAWAY for secret in rehearsal.env.job.secrets}


def keep_secrets(rehearsal: Rehearsal, engine_dir: Path, work: Path) -> None:
    """The throwaway secrets, as the engine encrypted them (`secure:`), also in the rehearsal's own stack file: a
    command the docs give the team (`grpo-infra submit`) loads that file, which must set every secret the job
    names, as a team's does."""
    settings = yaml.safe_load((engine_dir / f"Pulumi.{rehearsal.stack}.yaml").read_text()) or {}
    secure = {k: v for k, v in (settings.get("config") or {}).items() if k in secret_settings(rehearsal)}
    path = work / "stacks" / f"Pulumi.{rehearsal.stack}.yaml"
    data = yaml.safe_load(path.read_text())
    data["config"].update(secure)
    path.write_text(yaml.safe_dump(data, sort_keys=False))


def write_project(rehearsal: Rehearsal, project: Path, work: Path) -> Path:
    """`work/stacks/Pulumi.<stack>.yaml` and the stack's lock beside it; returns `work`."""
    stacks = work / "stacks"
    (stacks / "locks").mkdir(parents=True, exist_ok=True)
    (stacks / f"Pulumi.{rehearsal.stack}.yaml").write_text(yaml.safe_dump(stack_file(rehearsal), sort_keys=False))
    lock = project / lock_source(rehearsal.stack)
    if lock.is_file():
        shutil.copy(lock, work / lock_source(rehearsal.stack))
    return work


def program(rehearsal: Rehearsal, by: dict[str, Factor], drill: str | None = None) -> Callable[[], None]:
    """The project's program, with every Kubernetes object's CPU and memory scaled by its pool's factor (and,
    for a drill, its fault put into the Ray object: drills.py)."""

    def run() -> None:
        import pulumi

        from components.program import deploy

        def scale(args: pulumi.ResourceTransformArgs) -> pulumi.ResourceTransformResult | None:
            props = args.props
            if not args.type_.startswith("kubernetes:") or "kind" not in props:
                return None
            scaled = scale_object(rehearsal.env, _plain_copy(dict(props)), by)
            if drill in drills.DRILLS:
                scaled = drills.inject(drill, scaled)
            return pulumi.ResourceTransformResult(props=scaled, opts=args.opts)

        pulumi.runtime.register_resource_transform(scale)
        deploy()

    return run


def _plain_copy(value: Any) -> Any:
    """A copy of the dicts and lists of a resource's inputs; anything else (a Pulumi Output) is shared."""
    if isinstance(value, dict):
        return {k: _plain_copy(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_plain_copy(v) for v in value]
    return value


def host_paths(rehearsal: Rehearsal) -> list[Path]:
    """The host directories the rehearsal's pods mount (made empty before, removed after)."""
    env = rehearsal.env
    assert env.kubernetes is not None
    paths = [Path(v.host_path) for v in env.kubernetes.volumes if v.host_path and v.host_path.startswith(HOST_ROOT)]
    volume = env.job.checkpoint.volume
    if volume is not None and volume.host_path and volume.host_path.startswith(HOST_ROOT):
        paths.append(Path(volume.host_path))
    return paths


def run(
    rehearsal: Rehearsal,
    by: dict[str, Factor],
    project: Path,
    say: Say,
    *,
    keep: bool = False,
    drill: str | None = None,
) -> tuple[job_wait.Outcome, node_drills.Loss | None]:
    """Build, boot, deploy, follow the run to its end, then destroy and tear down (unless `keep`). With a fault
    `drill`, the drill's fault is in the Ray object and the run ends in the WaitError that shows it; with a node
    drill, a node of the running gang is lost (node_drills.py) and the run is followed as `up --wait` follows
    it (retries and all), without the policy's clients or the tenant's steps; its account is returned."""
    from ..image.build import build

    stack, env = rehearsal.stack, rehearsal.env
    say("image: building the CPU variant (cached by content)")
    build(env, project, progress=say)
    # The tools image holds the client that tries the NetworkPolicy (reach.py).
    archives = [*images.node_archives(env, project, stack, operators=True), nodeimages.tools_archive()]
    work = write_project(rehearsal, project, Paths(cluster.ROOT).root.parent / f"grpo-rehearsal-{stack}")
    for path in host_paths(rehearsal):
        shutil.rmtree(path, ignore_errors=True)
        path.mkdir(parents=True)
    head_nodes = env.kubernetes.head_pool.nodes if env.kubernetes and env.kubernetes.head_pool else 1
    say(f"nodes: {len(env.pools)} pool(s) and {max(2, head_nodes)} CPU node(s), real kubelets")
    cluster.up(
        stack, env, nodes="real", archives=archives, cpu_nodes=max(2, head_nodes), operators="charts", timeout=300
    )
    # The local cluster's own backend passphrase (`grpo-infra kube env`), unless the caller set one.
    if "PULUMI_CONFIG_PASSPHRASE" not in os.environ:
        os.environ.setdefault("PULUMI_CONFIG_PASSPHRASE_FILE", str(Paths(cluster.ROOT).root / "pulumi-passphrase"))
    try:
        chosen = engine.select(stack, work, cluster.engine_settings(stack), program=program(rehearsal, by, drill))
        from pulumi import automation as auto

        for key, value in secret_settings(rehearsal).items():
            chosen.set_config(key, auto.ConfigValue(value=value, secret=True))
        keep_secrets(rehearsal, Path(chosen.workspace.work_dir), work)
        engine.up(chosen, on_output=lambda line: say(line.rstrip("\n")))
        admin = functools.partial(cluster.kubectl, Paths(cluster.ROOT))
        # The operators as their charts made them, before anything depends on them (operators.py).
        operators.check_running(env, admin, say)
        # The run is followed, and the docs' steps done, as the tenant: with its own RBAC (tenant.py).
        kubectl = tenant.tenant_kubectl(Paths(cluster.ROOT), env.job.tenant)
        say(f"as the tenant: {tenant.identity(env.job.tenant)}")

        def try_policy(ray_cluster: str) -> None:
            reach.check(env, admin, ray_cluster, cluster.load_state()["nodes"], say)

        if drill in node_drills.NODE_DRILLS:
            assert env.job.checkpoint.volume is not None and env.job.checkpoint.volume.host_path
            lose = node_drills.NodeLossDrill(drill, env, admin, Path(env.job.checkpoint.volume.host_path), say)
            try:
                outcome = job_wait.wait(env, kubectl, say, timeout=1800, once_running=lose.start, release=True)
            finally:
                loss = lose.finish()
        else:
            loss = None
            outcome = kinds.follow(env, kubectl, say, work, UNSCHEDULABLE_S, once_running=try_policy)
            run = outcome.job.get("metadata", {}).get("name") if env.job.kind == "raycronjob" else None
            tenant.run_steps(env, kubectl, say, run)
        if not keep:
            engine.destroy(chosen, on_output=lambda line: say(line.rstrip("\n")))
            operators.check_destroyed(env, admin, say)
        return outcome, loss
    finally:
        if not keep:
            cluster.down()
            for path in host_paths(rehearsal):
                shutil.rmtree(path, ignore_errors=True)
