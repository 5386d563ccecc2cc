"""runc's `create` on a local GPU node, with the node's presentation hooks added (grpo_infra/kube/presented.py).

Run as `python3 -I node_runtime.py RUNC HOOKS_FILE RUNC-ARGS...` by the node's runc wrapper: reads the
bundle's config.json (`create --bundle DIR`), appends the OCI `createContainer` hooks listed in HOOKS_FILE
(a JSON list: the driver's, gpudriver.py; the HCAs', hcas.py), and execs runc with the arguments it was
given. Standard library only: it runs for every container the node creates.
"""

from __future__ import annotations

import json
import os
import sys


def bundle(args: list[str]) -> str:
    """The `--bundle` of runc's `create` or `run` (go-runc passes `--bundle DIR`; runc also takes `-b`,
    `--bundle=DIR`)."""
    for i, arg in enumerate(args):
        if arg in ("--bundle", "-b") and i + 1 < len(args):
            return args[i + 1]
        if arg.startswith("--bundle="):
            return arg.split("=", 1)[1]
    return os.getcwd()  # runc's default: the current directory


def add_hooks(config_path: str, hooks: list[dict[str, object]]) -> None:
    with open(config_path, encoding="utf-8") as handle:
        config = json.load(handle)
    config.setdefault("hooks", {}).setdefault("createContainer", []).extend(hooks)
    with open(config_path, "w", encoding="utf-8") as handle:
        json.dump(config, handle)


def main(argv: list[str]) -> None:
    runc, hooks_file, args = argv[0], argv[1], argv[2:]
    with open(hooks_file, encoding="utf-8") as handle:
        hooks = json.load(handle)
    add_hooks(os.path.join(bundle(args), "config.json"), hooks)
    os.execv(runc, [runc, *args])


if __name__ == "__main__":
    main(sys.argv[1:])
