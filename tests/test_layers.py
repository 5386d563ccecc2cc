"""The package's import structure is a tree of layers, written as import-linter contracts in pyproject.toml
(`[tool.importlinter]`; docs/architecture.md, "Layers"): no import circle between or inside the packages, each
package importing only the layers below it, the spec reading only the facts, nothing a stack renders reaching
the local labs, nothing importing the CLI. Imports inside functions count.

`lint-imports` checks the contracts; this module runs it, shows that each contract fails on an import that
breaks it, and checks the one kind of circle import-linter's `acyclic_siblings` does not look at.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import grimp
import pytest

from tests.conftest import ROOT, unavailable

LINT_IMPORTS = Path(sys.executable).with_name("lint-imports")


def _lint_imports(where: Path, *args: str) -> subprocess.CompletedProcess[str]:
    if not LINT_IMPORTS.is_file():
        unavailable(f"{LINT_IMPORTS} missing: install the dev extra (import-linter)")
    return subprocess.run([str(LINT_IMPORTS), "--no-logo", *args], cwd=where, capture_output=True, text=True)


def test_the_import_contracts_hold() -> None:
    # No cache: it would be written into the checkout, and the graph takes under a second to build.
    run = _lint_imports(ROOT, "--no-cache")
    assert run.returncode == 0, f"lint-imports (pyproject.toml [tool.importlinter]):\n{run.stdout}{run.stderr}"
    assert "0 broken" in run.stdout, run.stdout


# One import per contract that breaks it (and that the code does not have): contract id, file, line appended.
VIOLATIONS = {
    "acyclic": ("grpo_infra/image/driver.py", "from grpo_infra.image import dockerfile"),
    "layers": ("grpo_infra/slurmgen/conf.py", "from grpo_infra.k8s import labels"),
    "components": ("components/slurm.py", "from grpo_infra import engine"),
    "facts": ("grpo_infra/preflight/defaults.py", "from grpo_infra import manifests"),
    "spec": ("grpo_infra/spec/job.py", "from grpo_infra import deadline"),
    "labs": ("grpo_infra/k8s/rayjob.py", "from grpo_infra.image import oci"),
    "cli": ("grpo_infra/verl.py", "from grpo_infra.cli import app"),
}


def test_every_contract_has_its_breaking_import_below() -> None:
    contracts = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]["contracts"]
    assert [c["id"] for c in contracts] == list(VIOLATIONS)


@pytest.fixture(scope="module")
def project_copy(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The project's code and contracts, copied where an import can be added (the bundled charts aside)."""
    copy = tmp_path_factory.mktemp("project")
    shutil.copy(ROOT / "pyproject.toml", copy)
    for package in ("grpo_infra", "components"):
        shutil.copytree(ROOT / package, copy / package, ignore=shutil.ignore_patterns("__pycache__", "*.tgz"))
    return copy


@pytest.mark.parametrize("contract", VIOLATIONS)
def test_each_contract_fails_on_an_import_that_breaks_it(contract: str, project_copy: Path) -> None:
    """The contracts are checked against the code, not trusted: each fails on its own breaking import alone."""
    path, line = VIOLATIONS[contract]
    module = project_copy / path
    text = module.read_text()
    try:
        module.write_text(f"{text}\n{line}  # noqa\n")
        run = _lint_imports(project_copy, "--no-cache", "--contract", contract)
    finally:
        module.write_text(text)
    assert run.returncode == 1, run.stdout + run.stderr
    assert "Contracts: 0 kept, 1 broken." in run.stdout, run.stdout


def circles_outside_siblings(graph: grimp.ImportGraph) -> list[tuple[str, str]]:
    """Imports in a circle that `acyclic_siblings` does not look at (it compares siblings only): those out of a
    package's own module (its `__init__`) and those from one root package into the other.

    Together with the `acyclic` contract this finds every circle: a circle whose modules all lie below some
    package's own module, in two or more of its children, is a circle between those siblings."""
    found = []
    for importer in sorted(graph.modules):
        is_package = bool(graph.find_children(importer))
        for imported in sorted(graph.find_modules_directly_imported_by(importer)):
            crosses = importer.split(".")[0] != imported.split(".")[0]
            if (is_package or crosses) and graph.chain_exists(importer=imported, imported=importer):
                found.append((importer, imported))
    return found


def test_no_circle_through_a_package_or_between_the_root_packages() -> None:
    assert circles_outside_siblings(grimp.build_graph("grpo_infra", "components", cache_dir=None)) == []


def test_a_circle_through_a_package_or_between_root_packages_is_found() -> None:
    graph = grimp.ImportGraph()
    for importer, imported in [
        ("p", "p.a"),  # the package's own module imports its child, which imports it back through a sibling
        ("p.a", "p.b"),
        ("p.b", "p"),
        ("q.x", "r.y"),  # a circle between two root packages
        ("r.y", "q.x"),
        ("p.c", "p.d"),  # no circle
    ]:
        graph.add_import(importer=importer, imported=imported)
    assert circles_outside_siblings(graph) == [("p", "p.a"), ("q.x", "r.y"), ("r.y", "q.x")]
