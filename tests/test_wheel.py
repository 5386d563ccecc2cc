"""The package as a user installs it: the wheel built from this tree, installed (not editable) with its
declared dependencies and no extra into an empty virtualenv, runs `stacks`, `check` and `synth` for every
shipped stack from a directory outside the project.

Everything else in the suite imports the checkout with every extra installed, so a template left out of
the package data, or a module imported but not declared, would pass there and fail only for users.

The wheel is built with the test's own interpreter (`--no-build-isolation` when setuptools is there);
installing reuses pip's cache, so only a cold cache downloads.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys
import venv
import zipfile
from pathlib import Path

import pytest

import grpo_infra
from grpo_infra import synth
from grpo_infra.spec import list_stacks, load_stack

ROOT = Path(__file__).resolve().parents[1]
STACKS = list_stacks(ROOT)
# What the build reads: the project metadata and the two packages it lists.
BUILD_INPUTS = ("pyproject.toml", "grpo_infra", "components")


def _run(argv: list[str], cwd: Path, timeout: float = 600) -> subprocess.CompletedProcess[str]:
    """A command with no trace of the checkout: no PYTHONPATH, no active virtualenv, cwd outside it."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV", "PYTHONHOME")}
    env["COLUMNS"] = "200"
    return subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The bin/ of a fresh virtualenv holding the wheel and its declared dependencies."""
    base = tmp_path_factory.mktemp("wheel")
    source = base / "src"
    source.mkdir()
    for name in BUILD_INPUTS:
        path = ROOT / name
        if path.is_dir():
            # A copy: setuptools' build/ folder in the checkout could hold files removed since.
            shutil.copytree(path, source / name, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
        else:
            shutil.copy2(path, source / name)
    isolation = [] if importlib.util.find_spec("setuptools") is None else ["--no-build-isolation"]
    pip = [sys.executable, "-m", "pip", "--disable-pip-version-check"]
    built = _run([*pip, "wheel", "--no-deps", *isolation, "--wheel-dir", str(base / "dist"), str(source)], cwd=base)
    assert built.returncode == 0, built.stdout + built.stderr
    (wheel,) = (base / "dist").glob("grpo_infra-*.whl")
    venv.create(base / "venv", with_pip=False)
    python = base / "venv" / "bin" / "python"
    # `--python`: this pip installs into the new environment, which then needs no pip of its own.
    done = _run([*pip, "--python", str(python), "install", "--no-compile", str(wheel)], cwd=base)
    assert done.returncode == 0, done.stdout + done.stderr
    return python.parent


@pytest.fixture(scope="module")
def elsewhere(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A working directory outside the project: nothing found by walking up from it."""
    return tmp_path_factory.mktemp("elsewhere")


def test_the_command_runs_the_installed_package_not_the_checkout(installed: Path, elsewhere: Path) -> None:
    found = _run([str(installed / "python"), "-c", "import grpo_infra; print(grpo_infra.__file__)"], cwd=elsewhere)
    assert found.returncode == 0, found.stderr
    assert Path(found.stdout.strip()).is_relative_to(installed.parent)
    helped = _run([str(installed / "grpo-infra"), "--help"], cwd=elsewhere)
    assert helped.returncode == 0, helped.stderr
    assert "synth" in helped.stdout and "check" in helped.stdout


def test_stacks_lists_every_shipped_stack(installed: Path, elsewhere: Path) -> None:
    listed = _run([str(installed / "grpo-infra"), "stacks", "--root", str(ROOT)], cwd=elsewhere)
    assert listed.returncode == 0, listed.stdout + listed.stderr
    assert STACKS and all(name in listed.stdout for name in STACKS)


@pytest.mark.parametrize("stack", STACKS)
def test_check_passes_every_shipped_stack(installed: Path, elsewhere: Path, stack: str) -> None:
    checked = _run([str(installed / "grpo-infra"), "check", stack, "--root", str(ROOT)], cwd=elsewhere)
    assert checked.returncode == 0, checked.stdout + checked.stderr


@pytest.mark.parametrize("stack", STACKS)
def test_synth_writes_what_the_checkout_renders(installed: Path, elsewhere: Path, tmp_path: Path, stack: str) -> None:
    """Byte for byte, but for where the bundled Helm charts are: their absolute path is the package's own."""
    done = _run(
        [str(installed / "grpo-infra"), "synth", stack, "--root", str(ROOT), "--out", str(tmp_path)], cwd=elsewhere
    )
    assert done.returncode == 0, done.stdout + done.stderr
    installed_package = str(next(installed.parent.glob("lib/python*/site-packages/grpo_infra")))
    checkout_package = str(Path(grpo_infra.__file__).parent)
    written = {
        str(p.relative_to(tmp_path / stack)): p.read_text(encoding="utf-8").replace(installed_package, checkout_package)
        for p in sorted((tmp_path / stack).rglob("*"))
        if p.is_file()
    }
    assert written == synth.render(load_stack(stack, ROOT).environment)
    charts = [line.removeprefix("chart: ") for text in written.values() for line in text.splitlines()]
    for chart in (c.replace(checkout_package, installed_package) for c in charts if c.endswith(".tgz")):
        assert Path(chart).is_file(), f"{chart}: a bundled chart the install does not hold"


def test_the_image_gets_the_installed_package_which_builds_again_with_every_file(
    installed: Path, elsewhere: Path, tmp_path: Path
) -> None:
    """`grpo-infra image build` (and a rehearsal) for a team's own project installs into the CPU image the
    package that runs the command: an installed wheel has no pyproject.toml, so the copy gets one, and what it
    builds holds every file of the package (the lifecycle's templates the pods' scripts are made from)."""
    copy = tmp_path / "src"
    program = (
        "import sys; from pathlib import Path; from grpo_infra.image import build; "
        "root = build.source_root(); print(root); build._copy_source(root, Path(sys.argv[1]))"
    )
    done = _run([str(installed / "python"), "-c", program, str(copy)], cwd=elsewhere)
    assert done.returncode == 0, done.stderr
    assert Path(done.stdout.strip()).is_relative_to(installed.parent), "the installed package, not the checkout"
    isolation = [] if importlib.util.find_spec("setuptools") is None else ["--no-build-isolation"]
    pip = [sys.executable, "-m", "pip", "--disable-pip-version-check"]
    built = _run(
        [*pip, "wheel", "--no-deps", *isolation, "--wheel-dir", str(tmp_path / "dist"), str(copy)], cwd=tmp_path
    )
    assert built.returncode == 0, built.stdout + built.stderr
    (wheel,) = (tmp_path / "dist").glob("grpo_infra-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    assert {"grpo_infra/lifecycle/ray_node.sh.j2", "grpo_infra/probe.py", "grpo_infra/image/guard.py"} <= names
