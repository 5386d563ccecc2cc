"""runc's `create` on a local GPU node, with the node's driver hook added (grpo_infra/kube/gpudriver.py).

Run as `python3 -I driver_runtime.py RUNC DRIVER_DIR RUNC-ARGS...` by the node's runc wrapper: reads the
bundle's config.json (`create --bundle DIR`), appends one `createContainer` hook that binds DRIVER_DIR
read-only over the container's proc/driver, and execs runc with the arguments it was given. Standard
library only: it runs for every container the node creates.
"""

from __future__ import annotations

import json
import os
import sys

HOOK = 'mount --bind "$0" proc/driver && mount -o remount,bind,ro proc/driver'


def bundle(args: list[str]) -> str:
    """The `--bundle` of runc's `create` or `run` (go-runc passes `--bundle DIR`; runc also takes `-b`,
    `--bundle=DIR`)."""
    for i, arg in enumerate(args):
        if arg in ("--bundle", "-b") and i + 1 < len(args):
            return args[i + 1]
        if arg.startswith("--bundle="):
            return arg.split("=", 1)[1]
    return os.getcwd()  # runc's default: the current directory


def add_hook(config_path: str, driver_dir: str) -> None:
    with open(config_path, encoding="utf-8") as handle:
        config = json.load(handle)
    hook = {"path": "/bin/sh", "args": ["sh", "-c", HOOK, driver_dir]}
    config.setdefault("hooks", {}).setdefault("createContainer", []).append(hook)
    with open(config_path, "w", encoding="utf-8") as handle:
        json.dump(config, handle)


def main(argv: list[str]) -> None:
    runc, driver_dir, args = argv[0], argv[1], argv[2:]
    add_hook(os.path.join(bundle(args), "config.json"), driver_dir)
    os.execv(runc, [runc, *args])


if __name__ == "__main__":
    main(sys.argv[1:])
