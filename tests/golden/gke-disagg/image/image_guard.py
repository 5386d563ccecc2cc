"""The runtime image guard: what the image really holds, compared with what the stack declared.

Runs first in every job (Slurm: one task per node before the fabric gate and Ray; Kubernetes: an
init container of the head and of every worker pod). It prints the versions actually present and
exits 1 with one line naming the first difference, so a wrong image stops the job in seconds
instead of failing verl, the gate or KubeRay's probes much later.

Standard library only, and run as a lone file (`python3 image_guard.py ARGS`: on Kubernetes from a
ConfigMap the init container mounts, grpo_infra/image/pods.py) or inline (`python3 -c "<this file>" ARGS`:
Slurm's sbatch): the image may lack this project entirely (that is one of the things it reports). It
reads package metadata and files; it imports neither torch nor Ray (seconds, and a broken CUDA install
would crash the import).
"""

from __future__ import annotations

import argparse
import glob
import importlib.metadata
import importlib.util
import os
import re
import shutil
import socket
import subprocess
import sys

# Where the EFA installer puts libfabric and where aws-ofi-nccl is installed (the EFA installer's own
# layout, /opt/amazon/efa; aws-ofi-nccl built with --prefix=/opt/amazon/efa as verl's
# docker/aws/Dockerfile.extention.awsefa does, or the installer's /opt/amazon/ofi-nccl).
EFA_LIBFABRIC = "/opt/amazon/efa/lib/libfabric.so*"
OFI_NCCL_PLUGINS = ("/opt/amazon/ofi-nccl/lib/libnccl-net*.so*", "/opt/amazon/efa/lib/libnccl-net*.so*")


def dist_version(name: str) -> str | None:
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return None


def torch_cuda() -> str | None:
    """The CUDA release torch was built for, read from torch/version.py without importing torch."""
    spec = importlib.util.find_spec("torch")
    if spec is None or not spec.submodule_search_locations:
        return None
    path = os.path.join(next(iter(spec.submodule_search_locations)), "version.py")
    try:
        with open(path, encoding="utf-8") as handle:
            match = re.search(r"^cuda\b[^=]*=\s*['\"]([\d.]+)['\"]", handle.read(), re.MULTILINE)
    except OSError:
        return None
    return match.group(1) if match else None


def nccl_version() -> str | None:
    for name in ("nvidia-nccl-cu13", "nvidia-nccl-cu12"):
        found = dist_version(name)
        if found:
            return f"{found} ({name})"
    return None


def efa_provider() -> str | None:
    """libfabric's EFA install and the aws-ofi-nccl plugin, as file names; None when either is missing."""
    fabric = sorted(glob.glob(EFA_LIBFABRIC))
    plugin = sorted(p for pattern in OFI_NCCL_PLUGINS for p in glob.glob(pattern))
    if not fabric or not plugin:
        return None
    return f"{os.path.basename(fabric[0])} + {os.path.basename(plugin[0])}"


# The verbs library NCCL's IB transport opens (NVIDIA/nccl src/misc/ibvsymbols.cc: dlopen
# "libibverbs.so", then "libibverbs.so.1"), and where rdma-core's providers live on Ubuntu.
IBVERBS = "libibverbs.so.1"
VERBS_PROVIDERS = "/usr/lib/x86_64-linux-gnu/libibverbs/lib*-rdmav*.so"
# The kernel driver's version line: "NVRM version: NVIDIA UNIX x86_64 Kernel Module  580.65.06  Sun Jul ...".
DRIVER_VERSION_FILE = "/proc/driver/nvidia/version"
# Each attention implementation's module beyond torch (transformers checks `flash_attn` for
# flash_attention_2: transformers/utils/import_utils.py, is_flash_attn_2_available).
ATTENTION_MODULE = {"flash_attention_2": "flash_attn"}


def verbs_devices() -> tuple[list[str] | None, str]:
    """(HCA names libibverbs lists, why none) — None when the verbs library itself does not load.

    Loads libibverbs through ctypes as NCCL does and calls ibv_get_device_list, which loads the
    providers (mlx5, ...) matching the node's devices: an empty list with devices in
    /sys/class/infiniband means no provider loaded."""
    import ctypes

    try:
        verbs = ctypes.CDLL(IBVERBS)
    except OSError as exc:
        return None, f"{IBVERBS} does not load ({exc})"
    verbs.ibv_get_device_list.restype = ctypes.POINTER(ctypes.c_void_p)
    verbs.ibv_get_device_list.argtypes = [ctypes.POINTER(ctypes.c_int)]
    verbs.ibv_get_device_name.restype = ctypes.c_char_p
    verbs.ibv_get_device_name.argtypes = [ctypes.c_void_p]
    count = ctypes.c_int(0)
    listed = verbs.ibv_get_device_list(ctypes.byref(count))
    if not listed:
        return [], "ibv_get_device_list failed"
    names = [verbs.ibv_get_device_name(listed[i]).decode() for i in range(count.value)]
    verbs.ibv_free_device_list.argtypes = [ctypes.POINTER(ctypes.c_void_p)]
    verbs.ibv_free_device_list(listed)
    return names, ""


def verbs_providers() -> list[str]:
    return sorted(os.path.basename(p) for p in glob.glob(VERBS_PROVIDERS))


def driver_version(path: str = DRIVER_VERSION_FILE) -> str | None:
    """The loaded NVIDIA kernel driver's version from /proc/driver/nvidia/version, or None without one."""
    try:
        with open(path, encoding="utf-8") as handle:
            match = re.search(r"Kernel Module(?: for [\w]+)?\s+(\d+\.\d+(?:\.\d+)?)", handle.read())
    except OSError:
        return None
    return match.group(1) if match else None


def numeric(version: str) -> tuple[int, ...]:
    return tuple(int(p) for p in version.split(".") if p.isdigit())


def attention_import(module: str) -> tuple[str | None, str]:
    """(version, error) of importing the attention package in a child interpreter (its CUDA extension
    loads with it; a crash there must not take the guard down)."""
    code = f"import {module}, sys; sys.stdout.write(getattr({module}, '__version__', '?'))"
    try:
        run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return None, str(exc)
    if run.returncode != 0:
        lines = [line for line in run.stderr.strip().splitlines() if line.strip()]
        return None, lines[-1] if lines else f"exit {run.returncode}"
    return run.stdout.strip(), ""


def nccl_tests_nccl(binary: str) -> str | None:
    """The libnccl.so.2 the dynamic loader gives `binary` (`ldd`), or None when it resolves none."""
    try:
        run = subprocess.run(["ldd", binary], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return None
    match = re.search(r"libnccl\.so\.2 => (\S+)", run.stdout)
    return match.group(1) if match else None


def minor(version: str | None) -> str | None:
    return ".".join(version.split(".")[:2]) if version else None


def parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="image-guard", description="Compare the image with the stack's declaration.")
    parser.add_argument("--python", required=True, help="declared Python major.minor")
    parser.add_argument("--ray", required=True, help="declared Ray release")
    parser.add_argument("--verl", help="declared verl release")
    parser.add_argument("--engine", help="declared engine as NAME==VERSION")
    parser.add_argument("--cuda", help="declared CUDA major.minor of torch's build")
    parser.add_argument("--efa", action="store_true", help="EFA userspace and aws-ofi-nccl must be present")
    parser.add_argument("--nccl-tests", help="the nccl-tests binary the fabric gate runs (a name on PATH or a path)")
    parser.add_argument("--grpo-infra", action="store_true", help="the gate modules must be importable")
    parser.add_argument("--skip-engine", action="store_true", help="the job runs another entrypoint than verl")
    parser.add_argument("--attention", help="verl's attention implementation; its package must import")
    parser.add_argument("--rdma", action="store_true", help="the pool's fabric is InfiniBand/RoCE: verbs must load")
    parser.add_argument("--hca", action="append", default=[], help="an HCA the pool declares (repeated; job start)")
    parser.add_argument("--min-driver", help="the lowest NVIDIA driver the image's CUDA runs on (job start)")
    parser.add_argument("--driver-version-file", default=DRIVER_VERSION_FILE, help=argparse.SUPPRESS)
    parser.add_argument("--at-build", action="store_true", help="image build: skip what only a node has (HCAs, driver)")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse(sys.argv[1:] if argv is None else argv)
    node = os.environ.get("SLURMD_NODENAME") or socket.gethostname()
    python = f"{sys.version_info.major}.{sys.version_info.minor}"
    ray, verl, cuda, efa = dist_version("ray"), dist_version("verl"), torch_cuda(), efa_provider()
    engine_name, _, engine_version = (args.engine or "").partition("==")
    engine_found = dist_version(engine_name) if engine_name else None
    tests = shutil.which(args.nccl_tests) if args.nccl_tests else None
    gate = importlib.util.find_spec("grpo_infra") is not None
    present = [
        f"python {sys.version.split()[0]}",
        f"ray {ray or 'absent'}",
        f"verl {verl or 'absent'}",
        f"{engine_name or 'engine'} {engine_found or 'absent'}",
        f"torch {dist_version('torch') or 'absent'} (CUDA {cuda or 'none'})",
        f"NCCL {nccl_version() or 'none'}",
        f"EFA {efa or 'none'}",
    ]
    if args.nccl_tests:
        present.append(f"nccl-tests {tests or 'absent'}")
    if args.grpo_infra:
        present.append(f"grpo_infra {'importable' if gate else 'absent'}")
    module = ATTENTION_MODULE.get(args.attention or "")
    attention, attention_error = attention_import(module) if module else (None, "")
    if module:
        present.append(f"{module} {attention or 'absent'}")
    devices, verbs_error = verbs_devices() if args.rdma else ([], "")
    if args.rdma:
        providers = ", ".join(verbs_providers()) or "none"
        present.append(f"verbs providers {providers}, HCAs {', '.join(devices or []) or 'none'}")
    tests_nccl = nccl_tests_nccl(tests) if tests else None
    if tests:
        present.append(f"nccl-tests NCCL {tests_nccl or 'unresolved'}")
    driver = None if args.at_build else driver_version(args.driver_version_file)
    if args.min_driver and not args.at_build:
        present.append(f"driver {driver or 'none'}")
    print(f"image guard [{node}]: {', '.join(present)}", flush=True)

    wrong: list[str] = []
    if python != args.python:
        wrong.append(f"python {args.python} declared, {python} in the image")
    if ray != args.ray:
        wrong.append(f"ray {args.ray} declared, {ray or 'none'} in the image")
    if args.verl and verl != args.verl:
        wrong.append(f"verl {args.verl} declared, {verl or 'none'} in the image")
    if engine_name and not args.skip_engine and engine_found != engine_version:
        wrong.append(f"{engine_name} {engine_version} declared, {engine_found or 'none'} in the image")
    if args.cuda and minor(cuda) != args.cuda:
        wrong.append(f"CUDA {args.cuda} declared, torch built for {cuda or 'no CUDA'}")
    if args.efa and efa is None:
        wrong.append("EFA userspace declared, no libfabric EFA provider with aws-ofi-nccl in /opt/amazon")
    if args.nccl_tests and tests is None:
        wrong.append(f"nccl-tests needed by the fabric gate, {args.nccl_tests} not found")
    if args.grpo_infra and not gate:
        wrong.append("grpo_infra declared, not importable by python3")
    if module and attention is None:
        wrong.append(f"attention {args.attention} declared, {module} does not import ({attention_error})")
    if args.rdma and devices is None:
        wrong.append(f"the pool's fabric needs RDMA verbs, {verbs_error}: NCCL would fall back to TCP sockets")
    elif args.rdma and not verbs_providers():
        wrong.append(f"the pool's fabric needs RDMA verbs, no provider in {os.path.dirname(VERBS_PROVIDERS)}")
    elif args.rdma and args.hca and not args.at_build and not devices:
        declared = ",".join(args.hca)
        wrong.append(f"the pool declares HCAs {declared}, no verbs device loads here (provider or device missing)")
    if tests and tests_nccl is not None and "/nvidia/nccl/" not in tests_nccl:
        wrong.append(f"{args.nccl_tests} loads {tests_nccl}, not torch's NCCL: the gate would measure another NCCL")
    if args.min_driver and not args.at_build:
        # The CPU variant declares no CUDA of its own; the driver floor is the production image's.
        needs = f"CUDA {args.cuda} needs" if args.cuda else "the declared image's CUDA needs"
        if driver is None:
            wrong.append(f"no NVIDIA driver ({DRIVER_VERSION_FILE} unreadable); {needs} >= {args.min_driver}")
        elif numeric(driver) < numeric(args.min_driver):
            wrong.append(f"NVIDIA driver {driver} on this node, {needs} >= {args.min_driver}")
    if wrong:
        print(f"image guard [{node}]: FAIL {'; '.join(wrong)}", flush=True)
        return 1
    print(f"image guard [{node}]: PASS the image matches the stack's declaration", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
