"""The CPU variant of a stack's image: recipe, cache key, and the built archive run as a node would run it.

The archive tests build the image when it is not cached (minutes, needs root, debootstrap and the
package indexes; skipped without them on a developer's machine, failed under CI) and run the runtime
guard in a container of it: umoci unpacks the archive into an OCI bundle and runc starts it.
"""

from __future__ import annotations

import os
import shutil
import time
from pathlib import Path

import pytest

from grpo_infra.image import build, oci
from grpo_infra.spec import load_stack
from tests.conftest import unavailable

ROOT = Path(__file__).resolve().parents[2]


def _env(stack: str = "local-k8s"):
    return load_stack(stack, ROOT).environment


def test_recipe_follows_the_stack_and_its_lock() -> None:
    """The variant installs the declared Ray, verl and engine, with the lock's versions as constraints."""
    env = _env()
    plan = build.recipe(env, ROOT)
    contents = env.image.contents
    assert plan.ref == env.image.ref
    assert plan.with_deps == (f"ray[default]=={contents.ray}",)
    assert plan.without_deps == (f"verl=={contents.verl}", f"{contents.engine.name}=={contents.engine.version}")
    assert f"ray=={contents.ray}" in plan.constraints
    assert not any(c.startswith(("torch==", "flash-attn==")) for c in plan.with_deps + plan.without_deps)


def test_the_variant_of_a_verbs_fabric_stack_carries_the_rdma_userspace_its_production_image_does() -> None:
    """onprem-k8s's pool talks RoCE: its guard checks that libibverbs loads, at build and on the nodes, so
    the CPU variant installs the verbs userspace as the Dockerfile does (`grpo-infra rehearse onprem-k8s`
    stopped at the build's guard without it); local-k8s has no such fabric and keeps its packages."""
    from grpo_infra.image.dockerfile import RDMA_PACKAGES

    assert set(RDMA_PACKAGES) <= set(build.recipe(_env("onprem-k8s"), ROOT).apt)
    assert build.recipe(_env(), ROOT).apt == build.APT_PACKAGES


def test_cache_key_changes_with_what_the_image_holds(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Same inputs, same archive; another Ray pin or another grpo-infra source, another archive. The source is
    the package that runs the command (`source_root`), never the `--root` project's, which holds stacks."""
    env = _env()
    key = build.recipe(env, ROOT).key()
    assert build.recipe(env, ROOT).key() == key
    contents = env.image.contents.model_copy(update={"ray": "2.59.0"})
    other = env.model_copy(update={"image": env.image.model_copy(update={"contents": contents})})
    assert build.recipe(other, ROOT).key() != key
    project = tmp_path / "project"
    shutil.copytree(ROOT / "grpo_infra", project / "grpo_infra", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(ROOT / "pyproject.toml", project)
    (project / "grpo_infra" / "image" / "guard.py").write_text("# changed\n", encoding="utf-8")
    assert build.recipe(env, project).key() == key, "a --root project's files are not the image's"
    monkeypatch.setattr(build, "source_root", lambda: project)
    assert build.recipe(env, ROOT).key() != key, "another package source, another archive"


def test_variant_declares_what_it_holds() -> None:
    """The guard holds the variant to its own Python and to no CUDA, and still to the stack's Ray/verl/engine;
    on a GPU node also to the declared CUDA's driver floor (a node fact, which the local GPU nodes present)."""
    env = _env()
    args = build.variant_guard_args(env, gpu_node=False)
    assert args[args.index("--python") + 1] == build.SUITE_PYTHON
    assert args[args.index("--ray") + 1] == env.image.contents.ray
    assert args[args.index("--engine") + 1] == "sglang==0.5.12"
    assert "--cuda" not in args and "--min-driver" not in args
    assert "--grpo-infra" in args
    on_gpu_node = build.variant_guard_args(env)
    assert env.image.contents.cuda == "13.0"
    assert on_gpu_node == [*args, "--min-driver", "580.65.06"]


def test_a_stack_without_an_image_reference_is_refused() -> None:
    env = _env()
    bare = env.model_copy(update={"image": env.image.model_copy(update={"ref": None})})
    with pytest.raises(build.BuildError, match="no `ref`"):
        build.recipe(bare, ROOT)


@pytest.fixture(scope="module")
def built() -> build.Built:
    env = _env()
    if build.cached_record(env, ROOT) is None and (os.geteuid() != 0 or shutil.which("debootstrap") is None):
        unavailable("the CPU image is not built and cannot be here (root and debootstrap needed)")
    return build.build(env, ROOT, progress=print)


def _runtime() -> None:
    if shutil.which("umoci") is None or shutil.which("runc") is None:
        unavailable("umoci/runc missing: run scripts/install-system-deps.sh")


def test_archive_is_tagged_as_the_pods_name_it(built: build.Built) -> None:
    assert oci.archive_reference(built.archive) == _env().image.ref
    assert built.archive.parent == oci.cache_dir()


def test_second_build_is_a_cache_hit(built: build.Built) -> None:
    started = time.monotonic()
    again = build.build(_env(), ROOT)
    assert again.cached and again.archive == built.archive
    assert time.monotonic() - started < 30


def test_guard_passes_inside_the_image(built: build.Built) -> None:
    """The runtime guard, as the pods' init container runs it (`python3 -c`), passes in a container of the archive."""
    _runtime()
    env = _env()
    code, out = oci.run_in_container(
        built.archive,
        env.image.ref,
        ["python3", "-c", build.guard_program(), *build.variant_guard_args(env, gpu_node=False)],
    )
    assert code == 0, out
    assert "PASS the image matches" in out
    assert "ray 2.60.0" in out and "verl 0.9.1" in out and "grpo_infra importable" in out


def test_a_wrong_ray_pin_fails_at_the_guard_with_one_line(built: build.Built) -> None:
    _runtime()
    env = _env()
    args = build.variant_guard_args(env, gpu_node=False)
    args[args.index("--ray") + 1] = "2.59.0"
    code, out = oci.run_in_container(built.archive, env.image.ref, ["python3", "-c", build.guard_program(), *args])
    assert code == 1
    fails = [line for line in out.splitlines() if "FAIL" in line]
    assert len(fails) == 1 and fails[0].endswith("FAIL ray 2.59.0 declared, 2.60.0 in the image"), out


def test_differences_name_every_gpu_package_left_out(built: build.Built) -> None:
    """Computed from the lock and the variant's own record: torch, flash-attn and the CUDA wheels are
    listed as absent from the variant, and nothing both images hold at the same version is listed."""
    env = _env()
    rows = build.differences(env, built.record)
    python = {name: (prod, cpu) for kind, name, prod, cpu in rows if kind == "python"}
    for name in ("torch", "flash-attn", "sglang-kernel", "nvidia-nccl-cu13"):
        assert name in python and python[name][1] == "absent", name
    assert "ray" not in python and "verl" not in python  # same version in both
    assert ("base", "image", env.image.build.base, f"debian {build.SUITE} debootstrap --variant=minbase") in rows


def test_docs_table_is_the_computed_one(built: build.Built) -> None:
    """docs/images.md shows exactly what `grpo-infra image build local-k8s --differences` prints."""
    doc = (ROOT / "docs" / "images.md").read_text(encoding="utf-8")
    begin = "<!-- differences:begin (grpo-infra image build local-k8s --differences) -->\n"
    end = "<!-- differences:end -->"
    embedded = doc[doc.index(begin) + len(begin) : doc.index(end)]
    assert embedded == build.differences_markdown(_env(), built.record), "regenerate the table in docs/images.md"
