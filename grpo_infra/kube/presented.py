"""What a local GPU node presents to every container it runs, as a cloud GPU node's kernel does: the
NVIDIA driver (gpudriver.py) and, on a pool with an InfiniBand or RoCE fabric, its HCAs (hcas.py).

Both are OCI `createContainer` hooks: runc runs them in the container's mount namespace after the
container's own /proc and /sys are mounted and before pivot_root, with the root file system as the
working directory (runc 1.1 libcontainer/rootfs_linux.go `prepareRootfs`; OCI runtime-spec config.md
"createContainer Hooks"). The node's containerd runs runc through a wrapper (containerd's `BinaryName`)
that adds the node's hooks to every container it creates, as NVIDIA's container runtime adds its own. A
CPU node has no wrapper: its containers see the kernel's own, which has neither.
"""

from __future__ import annotations

import json
import shlex
from pathlib import Path
from typing import Any

RUNTIME_FILE = "runc-with-node-facts"
HOOKS_FILE = "runc-hooks.json"


def shell_hook(script: str, argument: Path) -> dict[str, Any]:
    """A hook running `sh -c SCRIPT ARGUMENT` (the argument is the script's `$0`)."""
    return {"path": "/bin/sh", "args": ["sh", "-c", script, str(argument)]}


def runtime_script(python: str, runc: str, hooks: list[dict[str, Any]], etc: Path) -> str:
    """containerd's runc for a GPU node: runc itself, but `create` (containerd's shim) and `run` go through
    the hook-adding wrapper. `hooks` are written to `etc/HOOKS_FILE`, which the wrapper reads."""
    hooks_file = etc / HOOKS_FILE
    hooks_file.write_text(json.dumps(hooks, indent=1))
    wrapper = Path(__file__).with_name("node_runtime.py")
    q = shlex.quote
    return (
        "#!/bin/sh\n"
        "# runc for a local GPU node: every container it creates sees the node's NVIDIA driver and HCAs\n"
        "# (grpo_infra/kube/presented.py).\n"
        f'case " $* " in *" create "* | *" run "*) exec {q(python)} -I {q(str(wrapper))} {q(runc)} '
        f'{q(str(hooks_file))} "$@" ;; esac\n'
        f'exec {q(runc)} "$@"\n'
    )
