"""Each built image's lock: made from `image.contents`, refused by `check` when it is not, and still
resolving on the package index (these last tests reach PyPI, as CI does)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from grpo_infra import synth
from grpo_infra.check import violations
from grpo_infra.image import lock as locking
from grpo_infra.spec import load_stack
from tests.conftest import ROOT, unavailable

from .conftest import BUILT, stack, variant


def uv() -> str:
    try:
        return locking.uv_binary()
    except locking.LockError as exc:
        unavailable(str(exc))
        raise


def rules(env) -> list[str]:  # type: ignore[no-untyped-def]
    return [v.rule for v in violations(env)]


@pytest.mark.parametrize("name", BUILT)
def test_every_built_stack_has_a_lock_of_its_own_contents(name: str) -> None:
    lock = stack(name).image.build.lock  # type: ignore[union-attr]
    assert lock is not None and locking.stale(stack(name).image, lock) is None
    assert lock.startswith(f"# grpo-infra image lock of stack {name}:")
    assert "# platform: cpython 3.12, x86_64-manylinux_2_39" in lock
    # Every requirement is pinned to one version with at least one file hash.
    assert all(locking.hashes(lock)[name] for name in locking.pins(lock))


@pytest.mark.parametrize("name", BUILT)
def test_verl_default_attention_puts_flash_attn_in_the_lock(name: str) -> None:
    assert locking.pins(stack(name).image.build.lock)["flash-attn"] == "2.8.3"  # type: ignore[union-attr,index]


def test_the_sglang_lock_holds_the_transformers_verl_pins() -> None:
    # verl 0.9.1's sglang extra: transformers==5.9.0 (its wheel METADATA); sglang 0.5.12 asks 5.6.0.
    pinned = locking.pins(stack("onprem-k8s").image.build.lock)  # type: ignore[arg-type,union-attr]
    assert pinned["transformers"] == "5.9.0" and pinned["sglang"] == "0.5.12" and pinned["verl"] == "0.9.1"


def test_check_refuses_a_lock_of_other_contents() -> None:
    env = variant("gke-dev", lambda d: d["image"]["contents"].update(ray="2.61.0"))
    (found,) = [v for v in violations(env) if v.rule == "image-lock-stale"]
    assert "grpo-infra image lock" in found.message and "ray[default]==2.61.0" in found.message


def test_check_refuses_a_lock_without_the_attention_package() -> None:
    """Dropping flash-attn from a lock (by hand, or by a resolver run without it) is refused offline."""

    def drop(data: dict) -> None:  # type: ignore[type-arg]
        text = data["image"]["build"]["lock"]
        data["image"]["build"]["lock"] = text.replace(dict(locking.blocks(text))["flash-attn"], "")

    env = variant("eks-prod", drop)
    (found,) = [v for v in violations(env) if v.rule == "image-lock-stale"]
    assert "pins flash-attn nowhere" in found.message


def test_check_refuses_a_built_image_without_a_lock() -> None:
    env = variant("gke-dev", lambda d: d["image"]["build"].pop("lock"))
    assert "image-lock-missing" in rules(env)


def test_flash_attention_needs_a_cuda_image() -> None:
    env = variant("gke-dev", lambda d: d["image"]["contents"].pop("cuda"))
    assert "image-attention-cuda" in rules(env)


def test_the_lock_targets_the_glibc_of_the_bases_ubuntu() -> None:
    jammy = variant("gke-dev", lambda d: d["image"]["build"].update(base="nvidia/cuda:12.8.1-cudnn-devel-ubuntu22.04"))
    assert locking.lock_inputs(jammy.image).platform == "x86_64-manylinux_2_35"
    odd = variant("gke-dev", lambda d: d["image"]["build"].update(base="registry.example/cuda:13.0-rocky9"))
    with pytest.raises(locking.LockError, match="names no Ubuntu release"):
        locking.lock_inputs(odd.image)


def copy_project(tmp_path: Path) -> Path:
    shutil.copy(ROOT / "Pulumi.yaml", tmp_path / "Pulumi.yaml")
    shutil.copytree(ROOT / "stacks", tmp_path / "stacks")
    return tmp_path


def cli(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run(
        [sys.executable, "-m", "grpo_infra.cli", *args], capture_output=True, text=True, env=env, cwd=cwd
    )


def test_check_exits_1_with_one_line_when_the_stack_moved_past_its_lock(tmp_path: Path) -> None:
    project = copy_project(tmp_path)
    path = project / "stacks" / "Pulumi.gke-dev.yaml"
    path.write_text(path.read_text().replace("ray: 2.60.0", "ray: 2.61.0"))
    run = cli("check", "gke-dev", "--json", cwd=project)
    assert run.returncode == 1
    assert [v["rule"] for v in json.loads(run.stdout) if v["rule"].startswith("image-lock")] == ["image-lock-stale"]


def test_synth_writes_the_lock_into_the_image_folder_and_diff_shows_it(tmp_path: Path) -> None:
    run = cli("synth", "eks-prod", "--out", str(tmp_path / "build"), cwd=ROOT)
    assert run.returncode == 0, run.stderr
    folder = tmp_path / "build" / "eks-prod" / "image"
    locked = locking.pins((ROOT / "stacks" / "locks" / "eks-prod.txt").read_text())
    written = locking.pins((folder / "requirements.lock").read_text()) | locking.pins(
        (folder / "source-build.lock").read_text()
    )
    assert written == locked


def test_setting_the_lock_in_the_stack_file_is_refused(tmp_path: Path) -> None:
    project = copy_project(tmp_path)
    path = project / "stacks" / "Pulumi.gke-dev.yaml"
    path.write_text(path.read_text().replace('build: {base: "', 'build: {lock: "x", base: "'))
    run = cli("check", "gke-dev", cwd=project)
    assert run.returncode == 2 and "image.build.lock: not a stack setting" in run.stderr


# --- against the package index -------------------------------------------------------------------


def test_every_shipped_lock_still_resolves_on_the_index() -> None:
    """Re-resolve each lock's inputs under its own pins: a pin yanked, a file replaced or a new
    conflict fails here, not in a build. Prints what it costs."""
    binary = uv()
    problems, started = {}, time.monotonic()
    for name in BUILT:
        image = load_stack(name, ROOT).environment.image
        problem = locking.verify(image, image.build.lock, uv=binary)  # type: ignore[union-attr,arg-type]
        if problem:
            problems[name] = problem
    print(f"re-resolved {len(BUILT)} locks in {time.monotonic() - started:.1f}s")
    assert problems == {}


# Variables that point a TLS client at a CA bundle; a fresh login shell (or `env -i`) has none of them.
CA_VARIABLES = ("SSL_CERT_FILE", "SSL_CERT_DIR", "REQUESTS_CA_BUNDLE", "PIP_CERT", "CURL_CA_BUNDLE", "UV_SYSTEM_CERTS")


def test_the_resolver_trusts_the_machines_certificate_store_without_ca_variables(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """As pip does: behind a TLS-inspecting proxy whose CA is only in the system store, uv's own roots
    fail ("invalid peer certificate: UnknownIssuer")."""
    for name in CA_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    image = stack("local-k8s").image
    assert locking.verify(image, image.build.lock, uv=uv()) is None  # type: ignore[union-attr,arg-type]
    assert locking.resolver_environment({"UV_SYSTEM_CERTS": "0"})["UV_SYSTEM_CERTS"] == "0"


def test_a_pin_that_no_longer_resolves_fails_verification() -> None:
    image = stack("gke-dev").image
    assert image.build is not None and image.build.lock is not None
    numpy = locking.pins(image.build.lock)["numpy"]
    broken = image.build.lock.replace(f"\nnumpy=={numpy} ", "\nnumpy==0.0.0 ")
    problem = locking.verify(image, broken, uv=uv())
    assert problem is not None and "does not resolve" in problem and "numpy" in problem


def test_the_sglang_set_is_impossible_without_verls_override(monkeypatch: pytest.MonkeyPatch) -> None:
    """The ResolutionImpossible the issue reported, reproduced: sglang 0.5.12 pins transformers 5.6.0."""
    binary = uv()
    monkeypatch.setattr(locking, "overrides", lambda image: [])
    with pytest.raises(locking.LockError, match=r"transformers==5\.6\.0"):
        locking.resolve(stack("onprem-k8s").image, uv=binary)


def test_the_gate_requirements_are_the_projects_own_without_pulumi() -> None:
    import re
    import tomllib

    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    names = {re.split(r"[=<>!~\[ ]", d)[0] for d in project}
    assert set(locking.GATE_REQUIREMENTS) - set(locking.IMPORTED_NOT_DECLARED) == {
        n for n in names if not n.startswith("pulumi")
    }
    pinned = locking.pins(stack("onprem-slurm").image.build.lock)  # type: ignore[arg-type,union-attr]
    assert set(locking.GATE_REQUIREMENTS) <= pinned.keys()
    assert not [n for n in pinned if n.startswith("pulumi")]


def test_the_gate_runs_on_the_locked_set_without_pulumi(tmp_path: Path) -> None:
    """The image builds this project's wheel from its checkout and installs it --no-deps: `python3 -m
    grpo_infra.cli nccl verdict` must run with only the lock's packages (at its versions), Pulumi absent.
    This runs the rendered install step itself on a copy of the build context."""
    binary = uv()
    lock = stack("onprem-slurm").image.build.lock  # type: ignore[union-attr]
    assert lock is not None
    pinned = locking.pins(lock)
    wanted = [*locking.GATE_REQUIREMENTS, *locking.PROJECT_BUILD_REQUIREMENTS]
    (tmp_path / "gate.txt").write_text("\n".join(wanted) + "\n")
    (tmp_path / "pins.txt").write_text(
        "\n".join(f"{n}=={v}" for n, v in sorted(pinned.items()) if n != "flash-attn") + "\n"
    )
    venv = tmp_path / "venv"
    seeded = locking.resolver_environment(os.environ)
    subprocess.run(
        [binary, "venv", "-q", "--seed", "-p", sys.executable, str(venv)], check=True, timeout=120, env=seeded
    )
    environ = {**seeded, "VIRTUAL_ENV": str(venv)}
    install = subprocess.run(
        [binary, "pip", "install", "-q", "-r", "gate.txt", "-c", "pins.txt"],
        cwd=tmp_path,
        env=environ,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert install.returncode == 0, install.stderr
    # The Dockerfile's step: COPY --from=project pyproject.toml and grpo_infra, then pip install them --no-deps.
    src = tmp_path / "src"
    src.mkdir()
    shutil.copy(ROOT / "pyproject.toml", src / "pyproject.toml")
    shutil.copytree(ROOT / "grpo_infra", src / "grpo_infra", ignore=shutil.ignore_patterns("__pycache__"))
    step = [*_rendered_project_install(), str(src)]
    python = str(venv / "bin" / "python")
    built = subprocess.run([python, "-m", *step], capture_output=True, text=True, timeout=600, cwd=tmp_path)
    assert built.returncode == 0, built.stdout[-1500:] + built.stderr[-1500:]
    gate = subprocess.run(
        [python, "-m", "grpo_infra.cli", "nccl", "verdict", "--help"],
        env={k: v for k, v in os.environ.items() if k != "PYTHONPATH"},
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert gate.returncode == 0, gate.stderr[-2000:]
    assert subprocess.run([python, "-c", "import pulumi"], capture_output=True).returncode != 0


def _rendered_project_install() -> list[str]:
    """The Dockerfile's `pip install ... /opt/grpo-infra/src` of the project, without its path."""
    from grpo_infra.image.dockerfile import dockerfile

    (line,) = [
        line
        for line in dockerfile(stack("onprem-slurm")).splitlines()
        if line.startswith("RUN pip install") and "/src" in line
    ]
    words = line.removeprefix("RUN ").split(" && ")[0].split()
    return [w for w in words if not w.endswith("/src")]


def test_pip_takes_the_rendered_flash_attn_step_with_its_hash(tmp_path: Path) -> None:
    """The build's flash-attn step, as far as it runs without nvcc: pip fetches the sdist the lock hashes,
    checks its sha256 and prepares it without build isolation against an installed torch."""
    (tmp_path / "source-build.lock").write_text(synth.render(stack("onprem-slurm"))["image/source-build.lock"])
    pip = [sys.executable, "-m", "pip", "download", "--no-deps", "--no-build-isolation", "--require-hashes"]
    run = subprocess.run(
        [*pip, "-r", "source-build.lock", "-d", "out"],
        cwd=tmp_path,
        env={**os.environ, "FLASH_ATTENTION_SKIP_CUDA_BUILD": "TRUE", "PIP_FIND_LINKS": ""},
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert run.returncode == 0, run.stdout[-1500:] + run.stderr[-1500:]
    assert [p.name for p in (tmp_path / "out").iterdir()] == ["flash_attn-2.8.3.tar.gz"]
