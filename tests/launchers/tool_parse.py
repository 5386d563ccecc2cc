"""Load rendered launcher files with SkyPilot's and dstack's own parsers; print one JSON line per file.

Runs inside .venv-launchers (requirements-launchers.txt), not the project's venv: the tests call it
as a subprocess. Usage: tool_parse.py skypilot|dstack FILE...  Output per file: {"file", "ok", ...}.
"""

from __future__ import annotations

import json
import sys
from typing import Any


def skypilot(path: str) -> dict[str, Any]:
    import sky

    task = sky.Task.from_yaml(path)
    (resources,) = list(task.resources)
    return {
        "name": task.name,
        "num_nodes": task.num_nodes,
        "accelerators": resources.accelerators,
        "cloud": str(resources.cloud) if resources.cloud else None,
        "image_id": resources.image_id,
        "use_spot": resources.use_spot,
        "ports": resources.ports,
        "envs": dict(task.envs),
        "secret_names": sorted(task.secrets),
        "file_mounts": task.file_mounts,
        # Bucket mounts, as SkyPilot's Storage objects: mount path -> (source, mode).
        "storage_mounts": {
            path: [str(store.source), store.mode.value] for path, store in (task.storage_mounts or {}).items()
        },
        # Volumes (`sky volumes apply`), as SkyPilot keeps them before resolving them against its server.
        "volumes": dict(task.volumes or {}),
        "run_is_str": isinstance(task.run, str),
        # The task's `config:` (pod_config and the like), as SkyPilot hands it to provisioning.
        "cluster_config_overrides": resources.cluster_config_overrides,
    }


def dstack(path: str) -> dict[str, Any]:
    import yaml
    from dstack._internal.core.models.configurations import parse_apply_configuration

    with open(path, encoding="utf-8") as f:
        conf = parse_apply_configuration(yaml.safe_load(f))
    out: dict[str, Any] = {"type": conf.type, "name": conf.name}
    if conf.type == "task":
        gpu = conf.resources.gpu
        out |= {
            "nodes": conf.nodes,
            "image": conf.image,
            "shell": conf.shell,
            "gpu_name": gpu.name,
            "gpu_count": [gpu.count.min, gpu.count.max],
            "env": {k: (v if isinstance(v, str) else None) for k, v in conf.env.items()},
            "ports": [p.container_port for p in conf.ports],
            "fleets": [getattr(f, "name", f) for f in conf.fleets or []],
            "commands": len(conf.commands),
            "files": [[f.local_path, f.path] for f in conf.files],
            "volumes": [
                [getattr(v, "name", None) or getattr(v, "instance_path", None), v.path] for v in conf.volumes or []
            ],
        }
    elif conf.ssh_config is not None:
        ssh = conf.ssh_config
        out |= {
            "placement": conf.placement.value if conf.placement else None,
            "ssh": {"user": ssh.user, "identity_file": ssh.identity_file, "hosts": [str(h) for h in ssh.hosts]},
        }
    else:
        gpu = conf.resources.gpu
        out |= {
            "nodes": [conf.nodes.min, conf.nodes.max],
            "placement": conf.placement.value if conf.placement else None,
            "backends": [b.value for b in conf.backends or []],
            "gpu_name": gpu.name,
            "gpu_count": [gpu.count.min, gpu.count.max],
        }
    return out


def main() -> int:
    kind, files = sys.argv[1], sys.argv[2:]
    parse = {"skypilot": skypilot, "dstack": dstack}[kind]
    for path in files:
        try:
            result = {"file": path, "ok": True, **parse(path)}
        except BaseException as exc:  # the tool's own refusal, reported as data
            result = {"file": path, "ok": False, "error": f"{type(exc).__name__}: {exc}"}
        print(json.dumps(result, default=str), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
