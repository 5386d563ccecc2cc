"""The job's image, as both targets use it: its reference, its Ray, its engine, its guard, its build.

Everything here reads `env.image` (grpo_infra/spec/image.py), the one place a stack states what its
image holds: the RayJob's `rayVersion`, verl's `rollout.name`, the verl config that overrides are
checked against, the runtime guard's expectations and the rendered Dockerfile all come from it.
"""

from __future__ import annotations

from pathlib import Path

from ..spec import Environment
from ..spec.image import ImageContents
from .verl_releases import RELEASES, VerlRelease, config_keys, fully_async_config_keys

GUARD_PROGRAM = Path(__file__).with_name("guard.py")

__all__ = [
    "GUARD_PROGRAM",
    "guard_args",
    "guard_program",
    "image_reference",
    "ray_version",
    "rollout_engine",
    "verl_config_keys",
    "verl_release",
]


def image_reference(env: Environment) -> str | None:
    """What pods and containers pull: `ref@digest` when the stack pins a digest, else `ref`."""
    return env.image.pinned_ref


def ray_version(env: Environment) -> str:
    """The Ray release in the image: the RayJob's `rayVersion` (KubeRay picks its probes by it)."""
    return env.image.contents.ray


def rollout_engine(env: Environment) -> str | None:
    """verl's `rollout.name`: the job's engine when it names one, else the image's (None: the image has none)."""
    if env.job.rollout.engine is not None:
        return env.job.rollout.engine
    engine = env.image.contents.engine
    return engine.name if engine is not None else None


def verl_release(env: Environment) -> VerlRelease | None:
    """The supported verl release the image declares, or None (no verl, or one without stored facts)."""
    version = env.image.contents.verl
    return RELEASES.get(version) if version is not None else None


def verl_config_keys(env: Environment) -> frozenset[str] | None:
    """Every key of the declared verl release's config for the job's layout (the trainer config, or the fully
    asynchronous trainer's for a disaggregated job), or None when it is not stored."""
    version = env.image.contents.verl
    if version is None:
        return None
    try:
        return fully_async_config_keys(version) if env.disaggregated else config_keys(version)
    except KeyError:
        return None


def guard_program() -> str:
    """The guard's source (the image may not contain this project): a Kubernetes job's ConfigMap holds it
    once (grpo_infra/k8s/shipped.py), Slurm's sbatch runs it as `python3 -c`."""
    return GUARD_PROGRAM.read_text(encoding="utf-8")


def guard_args(
    env: Environment, *, all_reduce_perf: str | None = None, grpo_infra: bool = False, gpu_node: bool = True
) -> list[str]:
    """The guard's arguments: every declared fact of the image, the node's facts it depends on, and the
    gate's tools when the job runs them there."""
    args = image_fact_args(env.image.contents)
    if env.gang.pool.fabric.verbs:
        args.append("--rdma")
    args += node_fact_args(env, gpu_node)
    if all_reduce_perf is not None:
        args += ["--nccl-tests", all_reduce_perf]
    if grpo_infra:
        args.append("--grpo-infra")
    return args


def image_fact_args(contents: ImageContents) -> list[str]:
    """What the image itself must hold: Python, Ray, verl, the engine, torch's CUDA, EFA, attention."""
    args = ["--python", contents.python, "--ray", contents.ray]
    if contents.verl is not None:
        args += ["--verl", contents.verl]
    if contents.engine is not None:
        args += ["--engine", f"{contents.engine.name}=={contents.engine.version}"]
    if contents.cuda is not None:
        args += ["--cuda", contents.cuda]
    if contents.efa:
        args.append("--efa")
    if contents.attention is not None:
        args += ["--attention", contents.attention]
    return args


def node_fact_args(env: Environment, gpu_node: bool) -> list[str]:
    """What the GPU node must give the declared image: the NVIDIA driver its CUDA runs on and the HCAs the
    pool declares. Taken from the declaration even when the pods run the CPU variant (`image.variant`), so
    the local GPU nodes are held to the production image's driver floor (grpo_infra/kube/gpudriver.py).

    `gpu_node=False` for a pod that holds no GPU (the Kubernetes head, on the head pool's CPU nodes): none.
    A CPU node never has them (no /proc/driver/nvidia, no verbs devices), so asking a head for them would
    keep it in `Init:CrashLoopBackOff` while Kueue holds the gang's GPUs."""
    if not gpu_node:
        return []
    from .driver import min_driver

    args: list[str] = []
    fabric = env.gang.pool.fabric
    if fabric.verbs:
        for hca in fabric.hcas:
            args += ["--hca", hca]
    needed = min_driver(env.image.contents.cuda)
    if needed is not None:
        args += ["--min-driver", needed]
    return args


def gate_tools(env: Environment) -> tuple[str | None, bool]:
    """What Slurm's fabric gate runs inside the image: (all_reduce_perf, needs grpo_infra).

    The nccl backend runs nccl-tests' `all_reduce_perf` in every rank's container and
    `python3 -m grpo_infra.cli nccl verdict` on the head; the gloo backend runs
    `python3 -m grpo_infra.preflight.ray_allreduce` on the head. On Kubernetes the gate's code travels
    in a ConfigMap (grpo_infra/k8s/gate.py), so the image needs neither.
    """
    gate = env.job.preflight.nccl
    if env.slurm is None or not gate.enabled:
        return None, False
    return (gate.all_reduce_perf if gate.backend == "nccl" else None), True


def host_provided(env: Environment, path: str) -> bool:
    """Whether `path` inside the container is bind-mounted from the host (`slurm.container.mounts`)."""
    if env.slurm is None or not path.startswith("/"):
        return False
    targets = [m.split(":")[-1] for m in env.slurm.container.mounts]
    return any(path == t or path.startswith(t.rstrip("/") + "/") for t in targets)


def enroot_uri(ref: str) -> str:
    """`registry/path:tag` as pyxis' `--container-image` takes it, `[REGISTRY#]IMAGE[:TAG]`
    (NVIDIA/pyxis README.md, srun --help): the registry host is separated by `#`, not `/`."""
    first, _, rest = ref.partition("/")
    is_registry = bool(rest) and ("." in first or ":" in first or first == "localhost")
    return f"{first}#{rest}" if is_registry else ref


def container_image(env: Environment) -> str | None:
    """The image a Slurm step enters: the local copy the stack names, else `image.ref` in the runtime's syntax."""
    if env.slurm is None or env.slurm.container.runtime == "none":
        return None
    container = env.slurm.container
    if container.image is not None:
        return container.image
    assert env.image.ref is not None
    if container.runtime == "pyxis":
        return enroot_uri(env.image.ref)
    return f"docker://{env.image.pinned_ref}"


def slurm_guard_args(env: Environment) -> list[str]:
    """The guard's arguments in the sbatch: the declared contents and the fabric gate's tools in the image."""
    all_reduce_perf, needs_grpo_infra = gate_tools(env)
    return guard_args(env, all_reduce_perf=all_reduce_perf, grpo_infra=needs_grpo_infra)
