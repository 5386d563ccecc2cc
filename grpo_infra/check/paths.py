"""The job's file paths and whether a shared mount holds them: one rule for both targets.

The model, the data and the checkpoint directory must be the same files on every node of the gang:
on Kubernetes a volume mounted in every Ray pod, on Slurm a file system every node mounts. A path
without a leading `/` (a hub model id such as `Qwen/Qwen2.5-7B-Instruct`, an `hdfs://` URL) is fetched
by verl itself and needs no mount.
"""

from __future__ import annotations

from ..spec import Environment


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
