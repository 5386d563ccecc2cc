"""The job's file paths and whether a shared mount holds them: one rule for both targets.

The model, the data and the checkpoint directory must be the same files on every node of the gang:
on Kubernetes a volume mounted in every Ray pod, on Slurm a file system every node mounts. A path
without a leading `/` (a hub model id such as `Qwen/Qwen2.5-7B-Instruct`, an `hdfs://` URL) is fetched
by verl itself and needs no mount.
"""

from __future__ import annotations

from ..spec import Environment
from .violation import Violation


def job_paths(env: Environment) -> list[tuple[str, str]]:
    """(spec field under `job.`, path) of every local path the job reads or writes."""
    job = env.job
    paths = [("job.modelPath", job.model_path)]
    paths += [(f"job.data.trainFiles[{i}]", f) for i, f in enumerate(job.data.train_files)]
    paths += [(f"job.data.valFiles[{i}]", f) for i, f in enumerate(job.data.val_files)]
    paths.append(("job.checkpoint.dir", job.checkpoint.dir))
    return [(field, path) for field, path in paths if path.startswith("/")]


def under(path: str, mount: str) -> bool:
    """Is `path` on the file system mounted at `mount`?"""
    return mount == "/" or path == mount or path.startswith(mount.rstrip("/") + "/")


def unshared(env: Environment, mounts: list[str]) -> list[tuple[str, str]]:
    """The job's paths that lie under none of `mounts`."""
    return [(field, path) for field, path in job_paths(env) if not any(under(path, m) for m in mounts)]


def slurm_host_path(env: Environment, path: str) -> str | None:
    """Where a job path lives on the node: itself without a container; through the container's bind
    mounts (`/host:/container`) with one; None when it is only inside the image."""
    assert env.slurm is not None
    container = env.slurm.container
    if container.runtime == "none":
        return path
    for mount in container.mounts:
        source, _, target = mount.partition(":")
        target = target or source
        if under(path, target):
            return source.rstrip("/") + path[len(target.rstrip("/")) :]
    return None


def slurm_path_warnings(env: Environment) -> list[Violation]:
    """Job paths that are not on a file system the stack declares shared (`slurm.sharedPaths`).

    A warning, not a refusal: the project cannot see the site's mounts, and a single-node job runs
    anyway; on a multi-node gang each node would read its own copy, or none.
    """
    from ..spec import ENVIRONMENT_KEY

    assert env.slurm is not None
    shared = env.slurm.shared_paths
    out = []
    for field, path in job_paths(env):
        host = slurm_host_path(env, path)
        if host is None:
            out.append(
                Violation(
                    "slurm-path-shared",
                    f"{ENVIRONMENT_KEY}.{field}",
                    f"{path} is inside the container image only: bind-mount it from a shared file system "
                    "(`slurm.container.mounts`)",
                )
            )
        elif not any(under(host, root) for root in shared):
            out.append(
                Violation(
                    "slurm-path-shared",
                    f"{ENVIRONMENT_KEY}.{field}",
                    f"{path} (on the nodes: {host}) is under no `slurm.sharedPaths` "
                    f"({', '.join(shared) or 'none declared'}): every node must see the same files",
                )
            )
    return out
