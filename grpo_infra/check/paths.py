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


def launcher_storage_violations(env: Environment) -> list[Violation]:
    """The SkyPilot and dstack tasks: every job path under a declared `storage` entry, and a multi-node
    gang's checkpoint dir on one the nodes share (a bucket in MOUNT mode, a shared volume). The nodes are
    provisioned for the run: nothing is there that the task does not attach, so a path under no entry is
    refused, as Kubernetes' `path-on-volume` is."""
    from ..spec import ENVIRONMENT_KEY

    if env.launchers is None:
        return []
    out = []
    for name in ("skypilot", "dstack"):
        launcher = getattr(env.launchers, name)
        if launcher is None:
            continue
        where = f"{ENVIRONMENT_KEY}.launchers.{name}.storage"
        mounts = [s.path for s in launcher.storage]
        for field, path in unshared(env, mounts):
            out.append(
                Violation(
                    "launcher-path-storage",
                    f"{ENVIRONMENT_KEY}.{field}",
                    f"{path} is under no `launchers.{name}.storage` path (declared: {', '.join(mounts) or 'none'}): "
                    f"the {name} nodes would not have it",
                )
            )
        if name == "dstack":
            out += dstack_fleet_storage_violations(env)
        checkpoint = env.job.checkpoint.dir
        if env.gang.nodes < 2 or not checkpoint.startswith("/"):
            continue
        holding = [s for s in launcher.storage if under(checkpoint, s.path)]
        if holding and not max(holding, key=lambda s: len(s.path)).shared_by_nodes():
            out.append(
                Violation(
                    "checkpoint-shared",
                    where,
                    f"{checkpoint} is on storage the {env.gang.nodes} {name} nodes do not share (each node "
                    "would keep its own shards and a restart could not resume): use a bucket with `mode: MOUNT` "
                    "or a volume every node mounts (`shared: true`)",
                )
            )
    return out


def dstack_fleet_storage_violations(env: Environment) -> list[Violation]:
    """A job path on a host directory (`instancePath`) of a fleet dstack provisions itself.

    A cloud fleet's hosts are made by dstack from its backends' machine images (dstack 0.22.5's
    `FleetConfiguration` has no step of yours that runs on them: no mount, no setup script), so
    `/fsx/...` there is an empty directory of one host, not a file system: the model is missing and verl
    fails at start. An SSH fleet (`fleet.ssh`) is hosts you run, with your mounts; a network volume
    (`volume:`) is attached by dstack. A team whose dstack server gives the backend an OS image that
    mounts the file system may waive the rule, saying so."""
    from ..spec import ENVIRONMENT_KEY

    assert env.launchers is not None and env.launchers.dstack is not None
    spec = env.launchers.dstack
    if spec.fleet is None or not spec.fleet.provisioned_by_dstack():
        return []
    on_entry: dict[int, list[str]] = {}
    for _, path in job_paths(env):
        holding = [s for s in spec.storage if under(path, s.path)]
        entry = max(holding, key=lambda s: len(s.path)) if holding else None
        if entry is not None and entry.instance_path is not None:
            on_entry.setdefault(spec.storage.index(entry), []).append(path)
    return [
        Violation(
            "dstack-fleet-storage",
            f"{ENVIRONMENT_KEY}.launchers.dstack.storage[{index}].instancePath",
            f"{spec.storage[index].instance_path} is a directory of the hosts dstack provisions for fleet "
            f"{spec.fleet.name} (a cloud fleet) and nothing mounts a file system there, so {', '.join(paths)} "
            "would be missing: run on an SSH fleet of hosts that mount it (`fleet.ssh`) or attach a network "
            "volume (`volume:`)",
        )
        for index, paths in on_entry.items()
    ]


def checkpoint_violations(env: Environment) -> list[Violation]:
    """A multi-node gang's checkpoint directory must be one shared file system, on either target.

    verl writes each rank's shards under `trainer.default_local_dir` and resumes (`resume_mode=auto`) from
    the newest `global_step_N` that `latest_checkpointed_iteration.txt` names; on per-node disks a restarted
    gang, placed on other nodes, finds a partial checkpoint or none and silently starts again from step 0.
    Kubernetes: the checkpoint volume is a claim or an NFS export, or a `hostPath` declared shared.
    Slurm: the directory, through the container's mounts, is under `slurm.sharedPaths`.
    """
    from ..spec import ENVIRONMENT_KEY

    found = launcher_storage_violations(env)
    if env.gang.nodes < 2:
        return found
    checkpoint = env.job.checkpoint
    gang = f"a {env.gang.nodes}-node gang"
    if env.kubernetes is not None:
        volume = checkpoint.volume
        if volume is None or volume.shared():
            return found
        return [
            *found,
            Violation(
                "checkpoint-shared",
                f"{ENVIRONMENT_KEY}.job.checkpoint.volume",
                f"hostPath {volume.host_path} is each node's own directory: {gang} would split its checkpoints "
                "over the nodes and a restart could not resume; use a ReadWriteMany `claimName` or `nfs`, or "
                "set `hostPathShared: true` if every node mounts one shared file system there",
            ),
        ]
    assert env.slurm is not None
    host = slurm_host_path(env, checkpoint.dir)
    if host is not None and any(under(host, root) for root in env.slurm.shared_paths):
        return found
    where = "inside the container image only" if host is None else f"on the nodes {host}, under no `slurm.sharedPaths`"
    return [
        *found,
        Violation(
            "checkpoint-shared",
            f"{ENVIRONMENT_KEY}.job.checkpoint.dir",
            f"{checkpoint.dir} is {where}: {gang} must checkpoint to one shared file system, or a requeued "
            "job cannot resume; put it on a shared mount and list that in `slurm.sharedPaths`",
        ),
    ]


def slurm_path_warnings(env: Environment) -> list[Violation]:
    """Job paths that are not on a file system the stack declares shared (`slurm.sharedPaths`).

    A warning, not a refusal: the project cannot see the site's mounts, and a single-node job runs
    anyway; on a multi-node gang each node would read its own copy, or none.
    """
    from ..spec import ENVIRONMENT_KEY

    assert env.slurm is not None
    shared = env.slurm.shared_paths
    out = []
    # A multi-node gang's checkpoint directory is refused instead (`checkpoint_violations`), not warned about.
    refused = {"job.checkpoint.dir"} if env.gang.nodes > 1 else set()
    for field, path in job_paths(env):
        if field in refused:
            continue
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
