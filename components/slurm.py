"""Slurm components: place the rendered Slurm files on the cluster, and take them away on destroy.

The files are exactly what `grpo-infra synth` writes under `slurm/` (one renderer, two consumers).
A local directory (the controller itself, or a mounted shared file system) is handled by a dynamic
provider whose create/update/delete are plain file operations; a directory on another machine is
reached over SSH with `pulumi_command.remote.Command`, running the scripts `placement_script` and
`removal_script` build. `scontrol reconfigure` runs after a change when the spec asks for it.
"""

from __future__ import annotations

import base64
import hashlib
import os
import shlex
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pulumi
import pulumi.dynamic
import pulumi_command

from grpo_infra import slurmgen
from grpo_infra.spec import Environment
from grpo_infra.synth import file_mode

RECONFIGURE = ("scontrol", "reconfigure")
_PREFIX = "slurm/"


def placed_files(env: Environment) -> dict[str, str]:
    """The rendered Slurm files by their name in the target directory (slurm.conf, gres.conf, ...)."""
    return {path.removeprefix(_PREFIX): text for path, text in slurmgen.render_files(env).items()}


def digest(files: dict[str, str]) -> str:
    """A stable fingerprint of the files: a change of any byte triggers a new placement."""
    h = hashlib.sha256()
    for name, text in sorted(files.items()):
        h.update(name.encode() + b"\0" + text.encode() + b"\0")
    return h.hexdigest()


@dataclass(frozen=True)
class SlurmFilesArgs:
    """What to place where: the rendered files and the `slurm.deploy` block of the spec."""

    files: dict[str, str]
    directory: str
    host: str | None = None
    user: str | None = None
    reconfigure: bool = False

    @classmethod
    def of(cls, env: Environment) -> SlurmFilesArgs:
        assert env.slurm is not None and env.slurm.deploy is not None
        deploy = env.slurm.deploy
        return cls(placed_files(env), deploy.directory, deploy.host, deploy.user, deploy.reconfigure)


# --- local placement: a dynamic provider doing plain file operations --------------------------


def write_files(directory: str, files: dict[str, str]) -> None:
    """Write every file atomically (a reader never sees half a slurm.conf)."""
    where = Path(directory)
    where.mkdir(parents=True, exist_ok=True)
    for name, text in files.items():
        target = where / name
        staging = target.with_name(f".{target.name}.grpo-tmp")
        staging.write_text(text, encoding="utf-8")
        staging.chmod(file_mode(text))
        os.replace(staging, target)


def remove_files(directory: str, names: list[str]) -> None:
    """Remove exactly the files we placed, then the directory if nothing else is left in it."""
    where = Path(directory)
    for name in names:
        (where / name).unlink(missing_ok=True)
    if where.is_dir() and not any(where.iterdir()):
        where.rmdir()


def reconfigure_slurm() -> None:
    """`scontrol reconfigure`: slurmctld and every slurmd re-read slurm.conf and the included files."""
    try:
        proc = subprocess.run(RECONFIGURE, capture_output=True, text=True, timeout=120, check=False)
    except FileNotFoundError:
        raise RuntimeError(
            "scontrol is not installed here; install slurm-client or set slurm.deploy.reconfigure: false"
        ) from None
    if proc.returncode != 0:
        raise RuntimeError(
            f"`scontrol reconfigure` failed ({proc.returncode}): {proc.stderr.strip() or proc.stdout.strip()}"
        )


class LocalFilesProvider(pulumi.dynamic.ResourceProvider):
    """Places the files into a local directory; inputs: directory, files, reconfigure."""

    def create(self, props: dict[str, Any]) -> pulumi.dynamic.CreateResult:
        write_files(props["directory"], props["files"])
        if props.get("reconfigure"):
            reconfigure_slurm()
        return pulumi.dynamic.CreateResult(id_=props["directory"], outs={**props, "digest": digest(props["files"])})

    def diff(self, _id: str, olds: dict[str, Any], news: dict[str, Any]) -> pulumi.dynamic.DiffResult:
        changed = [k for k in ("directory", "files", "reconfigure") if olds.get(k) != news.get(k)]
        return pulumi.dynamic.DiffResult(
            changes=bool(changed),
            replaces=["directory"] if "directory" in changed else [],
            delete_before_replace=False,
        )

    def update(self, _id: str, olds: dict[str, Any], news: dict[str, Any]) -> pulumi.dynamic.UpdateResult:
        write_files(news["directory"], news["files"])
        stale = sorted(set(olds.get("files", {})) - set(news["files"]))
        remove_files(news["directory"], stale)
        if news.get("reconfigure") and olds.get("files") != news["files"]:
            reconfigure_slurm()
        return pulumi.dynamic.UpdateResult(outs={**news, "digest": digest(news["files"])})

    def delete(self, _id: str, props: dict[str, Any]) -> None:
        remove_files(props["directory"], sorted(props.get("files", {})))


class LocalSlurmFiles(pulumi.dynamic.Resource):
    """The files in a local directory (the controller, or a shared file system mounted here)."""

    directory: pulumi.Output[str]
    digest: pulumi.Output[str]

    def __init__(self, name: str, args: SlurmFilesArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        props = {"directory": args.directory, "files": args.files, "reconfigure": args.reconfigure, "digest": None}
        super().__init__(LocalFilesProvider(), name, props, opts)


# --- remote placement: the same operations as shell scripts over SSH ---------------------------


def placement_script(directory: str, files: dict[str, str], reconfigure: bool) -> str:
    """A POSIX shell script that writes the files atomically (base64 keeps any byte intact)."""
    d = shlex.quote(directory)
    lines = ["set -eu", f"mkdir -p {d}"]
    for name, text in sorted(files.items()):
        target, staging = shlex.quote(f"{directory}/{name}"), shlex.quote(f"{directory}/.{name}.grpo-tmp")
        payload = base64.b64encode(text.encode()).decode()
        lines += [
            f"printf '%s' {payload} | base64 -d > {staging}",
            f"chmod {file_mode(text):o} {staging}",
            f"mv -f {staging} {target}",
        ]
    if reconfigure:
        lines.append(" ".join(RECONFIGURE))
    return "\n".join(lines) + "\n"


def removal_script(directory: str, names: list[str]) -> str:
    """A POSIX shell script that removes exactly our files, then the directory if it is empty."""
    d = shlex.quote(directory)
    removed = " ".join(shlex.quote(f"{directory}/{n}") for n in sorted(names))
    return f"set -eu\nrm -f {removed}\nrmdir {d} 2>/dev/null || true\n"


class SlurmFiles(pulumi.ComponentResource):
    """The stack's rendered Slurm files, placed where slurm.conf includes them."""

    def __init__(self, name: str, args: SlurmFilesArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("grpo-infra:slurm:SlurmFiles", name, None, opts)
        # Remove the old files before placing new ones: a replacement that created first would
        # have the old removal delete the freshly placed files.
        child = pulumi.ResourceOptions(parent=self, delete_before_replace=True)
        self.placement: pulumi.Resource
        if args.host is None:
            local = LocalSlurmFiles(f"{name}-local", args, child)
            self.placement = local
        else:
            connection = pulumi_command.remote.ConnectionArgs(host=args.host, user=args.user)
            self.placement = pulumi_command.remote.Command(
                f"{name}-ssh",
                connection=connection,
                create=placement_script(args.directory, args.files, args.reconfigure),
                delete=removal_script(args.directory, list(args.files)),
                triggers=[digest(args.files), args.directory],
                opts=child,
            )
        where = f"{args.host}:{args.directory}" if args.host else args.directory
        self.location = pulumi.Output.from_input(where)
        self.register_outputs({"location": where, "files": sorted(args.files), "digest": digest(args.files)})


def deploy_slurm(env: Environment) -> None:
    """Place the Slurm files when the spec says where; always export what users look up."""
    assert env.slurm is not None
    pulumi.export("partition", env.slurm.partition)
    pulumi.export("job", env.job.name)
    if env.slurm.deploy is None:
        return
    files = SlurmFiles("slurm-files", SlurmFilesArgs.of(env))
    pulumi.export("slurmFiles", files.location)
