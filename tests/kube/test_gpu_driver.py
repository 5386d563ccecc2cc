"""What a local node tells the job about its NVIDIA driver: a GPU node presents its pool's driver in
/proc/driver/nvidia/version to every container, read-only, as a cloud GPU node's kernel module does; a CPU
node presents none. The image guard the pods run reads exactly that file, so a pod that demands a driver on a
CPU node (a Ray head given the workers' guard) fails here as it would in the cloud
(tests/image/test_guard.py: the guard's one line without a driver; tests/kube/test_job_real.py: the
workers' guard holds the local-k8s gang to the declared CUDA's driver floor on real GPU nodes).

The containers run in real runc, through the wrapper the GPU nodes' containerd uses (needs root, runc, umoci)."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path
from typing import Any

from grpo_infra.image.oci import run_in_container
from grpo_infra.kube import gpudriver, nodeimages, presented
from grpo_infra.kube.nodes import real_nodes
from grpo_infra.spec import load_stack
from tests.conftest import unavailable

from .conftest import ROOT, local_k8s


def test_gpu_nodes_present_the_driver_their_images_cuda_needs_and_cpu_nodes_none() -> None:
    for stack in ("local-k8s", "eks-prod", "gke-dev", "onprem-k8s"):
        env = load_stack(stack, ROOT).environment
        nodes = real_nodes(env)
        assert env.image.contents.cuda == "13.0", stack
        assert {n.driver for n in nodes if n.devices} == {"580.65.06"}, stack
        assert {n.driver for n in nodes if not n.devices} == {None}, stack


def node_runc(tmp_path: Path) -> str:
    """The runc a GPU node of local-k8s gives containerd (grpo_infra/kube/realnodes.py `prepare_node`)."""
    if shutil.which("umoci") is None or shutil.which("runc") is None:
        unavailable("umoci/runc missing: run scripts/install-system-deps.sh")
    [driver] = {n.driver for n in real_nodes(local_k8s()) if n.driver}
    return wrapped_runc(tmp_path, [gpudriver.driver_hook(gpudriver.write_driver_dir(tmp_path, driver))])


def wrapped_runc(tmp_path: Path, hooks: list[dict[str, Any]]) -> str:
    """runc behind a node's wrapper adding `hooks` (grpo_infra/kube/realnodes.py `prepare_node`)."""
    runc = shutil.which("runc")
    assert runc is not None
    script = tmp_path / presented.RUNTIME_FILE
    script.write_text(presented.runtime_script(sys.executable, runc, hooks, tmp_path))
    script.chmod(0o755)
    return str(script)


def test_every_container_on_a_gpu_node_reads_the_driver_read_only_and_on_a_cpu_node_none(tmp_path: Path) -> None:
    archive, ref = nodeimages.tools_archive(), nodeimages.TOOLS_REF.rsplit(":", 1)[-1]  # its tag in the layout
    read = ["sh", "-c", "cat /proc/driver/nvidia/version && ! echo 1 2>/dev/null >/proc/driver/nvidia/version"]
    code, out = run_in_container(archive, ref, read, runc=node_runc(tmp_path), timeout=60)
    assert code == 0, out
    assert out.startswith("NVRM version: NVIDIA UNIX x86_64 Kernel Module  580.65.06  ")
    code, out = run_in_container(archive, ref, read, timeout=60)
    assert code != 0 and "nvidia" in out and "version" in out, out
