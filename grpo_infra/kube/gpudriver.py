"""What a GPU node of the local cluster tells the job about its NVIDIA driver, as a cloud node does.

On a machine with the NVIDIA kernel module loaded, `/proc/driver/nvidia/version` is a procfs entry of
the kernel's: every container on that node reads it, whatever GPUs it was allocated (procfs does not
namespace driver entries), and a machine without the module has no `/proc/driver/nvidia` at all. The
image guard reads exactly that file at job start (grpo_infra/image/guard.py `driver_version`), so a pod
that demands a driver on a CPU node fails there and then.

The local GPU nodes have no NVIDIA module, so each presents its pool's driver the way NVIDIA's container
runtime presents driver files, by a `createContainer` hook (presented.py) that binds the node's `driver/`
directory, read-only, over the container's `proc/driver`. runc itself refuses such a mount in
config.json (`checkProcMount`: only lxcfs's files may be mounted inside /proc), which is why it is a
hook, as nvidia-container-cli's is. A CPU node has no hook: its containers see the kernel's empty
/proc/driver, as on a cloud CPU node.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ..image.driver import MIN_DRIVER, min_driver
from ..spec import Environment
from .presented import shell_hook

# The newest driver floor the project knows, for an image that declares no CUDA.
NEWEST_FLOOR = max(MIN_DRIVER.values(), key=lambda v: tuple(int(p) for p in v.split(".")))
# The file's first line as the NVIDIA module writes it (nvidia.ko, `NVRM version:` banner); the guard's
# pattern reads the version after "Kernel Module".
VERSION_LINE = "NVRM version: NVIDIA UNIX x86_64 Kernel Module  {version}  (presented by the local GPU node)\n"
HOOK = 'mount --bind "$0" proc/driver && mount -o remount,bind,ro proc/driver'


def presented_driver(env: Environment) -> str:
    """The driver a GPU node of `env` presents: the lowest its image's CUDA runs on (what a pool set up as
    `check` demands provides at least), or the newest known floor for an image without CUDA."""
    return min_driver(env.image.contents.cuda) or NEWEST_FLOOR


def write_driver_dir(base: Path, version: str) -> Path:
    """The node's `driver/nvidia/version`, which its containers see as /proc/driver/nvidia/version."""
    driver = base / "driver"
    (driver / "nvidia").mkdir(parents=True, exist_ok=True)
    (driver / "nvidia" / "version").write_text(VERSION_LINE.format(version=version))
    return driver


def driver_hook(driver_dir: Path) -> dict[str, Any]:
    """The hook binding the node's `driver/` read-only over the container's /proc/driver."""
    return shell_hook(HOOK, driver_dir)
