"""Code the job's pods run that their image need not contain, shipped as ConfigMaps in the job's namespace.

Three programs travel this way: the fabric gate's package (`grpo_infra.k8s.gate`, mounted on the head), the
runtime image guard (`grpo_infra.image.guard`, mounted on the `image-guard` init container of every pod) and
the resume rule with the experiment's identity (`grpo_infra.lifecycle.resume`, mounted on the head, which runs
the job's driver). Every ConfigMap follow one rule (`code_config_map`): the job's namespace, named `<job>-<what>`, the
stack's and the job's labels, so `kubectl -l grpo-infra/job=<job>` lists them with the job's other objects.
The pod templates name them; they never hold the code itself.
"""

from __future__ import annotations

import hashlib
from importlib import resources
from typing import Any

from .. import training
from ..image import guard_program
from ..image.dockerfile import GUARD_FILE
from ..image.pods import DIGEST_CHARS, guard_digest
from ..image.pods import VOLUME as GUARD_VOLUME
from ..spec import Environment
from .labels import JOB_LABEL, MANAGED_BY

# A ConfigMap (like any object) must stay under etcd's 1 MiB request limit.
CONFIG_MAP_LIMIT_BYTES = 1024 * 1024


def code_config_map(env: Environment, name: str, data: dict[str, str]) -> dict[str, Any]:
    """A ConfigMap of code for the job's pods: in the job's namespace, labelled as the job's."""
    job = env.job
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": name, "namespace": job.tenant, "labels": {**MANAGED_BY, JOB_LABEL: job.name}},
        "data": data,
    }


def guard_config_map_name(env: Environment) -> str:
    """`<job>-image-guard-<digest>`: the guard program's content hash is part of the name.

    KubeRay restarts no pod when a ConfigMap it mounts changes, and the kubelet never re-runs a finished
    init container: a guard changed under a fixed name would reach only the pods created later, from an
    unchanged template, and the Ray object would not show it. With the hash in the name, a guard change
    is a new ConfigMap and one changed line per pod template of the Ray object (the volume's
    `configMap.name`), so `pulumi preview --diff` shows the Ray object changing, `pulumi up` updates it
    after the new ConfigMap exists, and every pod runs exactly the guard its template names.
    """
    return f"{env.job.name}-image-guard-{guard_digest()}"


def guard_config_map(env: Environment) -> dict[str, Any]:
    """The ConfigMap holding the image guard's program (`image_guard.py`), once per job."""
    return code_config_map(env, guard_config_map_name(env), {GUARD_FILE: guard_program()})


def guard_volume(env: Environment) -> dict[str, Any]:
    """The pod volume the `image-guard` init container mounts read-only (`grpo_infra.image.pods`)."""
    return {
        "name": GUARD_VOLUME,
        "configMap": {
            "name": guard_config_map_name(env),
            "items": [{"key": GUARD_FILE, "path": GUARD_FILE}],
            "defaultMode": 0o444,
        },
    }


# The resume rule's program and the experiment's identity, on the head (`grpo_infra.k8s.rayjob.resume_guard`).
RESUME_VOLUME = "grpo-infra-resume"
RESUME_MOUNT = "/opt/grpo-infra-resume"
RESUME_FILE = "resume.py"
IDENTITY_KEY = "experiment.json"


def resume_files(env: Environment) -> dict[str, str]:
    """The resume rule's program (one self-contained stdlib file, read from the installed package) and the
    experiment's identity it records and compares (`grpo_infra.training.experiment_identity`)."""
    program = resources.files("grpo_infra.lifecycle").joinpath(RESUME_FILE).read_text(encoding="utf-8")
    return {IDENTITY_KEY: training.identity_json(env) + "\n", RESUME_FILE: program}


def resume_config_map_name(env: Environment) -> str:
    """`<job>-resume-<digest>`: the files' hash is part of the name, for the reason `guard_config_map_name` gives
    (a changed experiment or program is a new ConfigMap and a changed line in the Ray object)."""
    digest = hashlib.sha256("\0".join(resume_files(env).values()).encode()).hexdigest()[:DIGEST_CHARS]
    return f"{env.job.name}-resume-{digest}"


def resume_enabled(env: Environment) -> bool:
    """The rule runs with `checkpoint.resume: auto`; with `disable` verl never resumes."""
    return env.job.checkpoint.resume == "auto"


def resume_config_map(env: Environment) -> dict[str, Any] | None:
    """The ConfigMap of the resume rule's files, once per job; None with `resume: disable`."""
    if not resume_enabled(env):
        return None
    return code_config_map(env, resume_config_map_name(env), resume_files(env))


def resume_volume(env: Environment) -> dict[str, Any]:
    """The head's read-only volume of the resume rule's files."""
    items = [{"key": key, "path": key} for key in resume_files(env)]
    return {
        "name": RESUME_VOLUME,
        "configMap": {"name": resume_config_map_name(env), "items": items, "defaultMode": 0o444},
    }


def resume_mount() -> dict[str, Any]:
    return {"name": RESUME_VOLUME, "mountPath": RESUME_MOUNT, "readOnly": True}
