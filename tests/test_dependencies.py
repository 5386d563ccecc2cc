"""Every third-party module the package imports comes from a distribution pyproject declares, at an exact pin
(or one a declared distribution itself requires at an exact pin: pydantic==2.13.4 → pydantic-core==2.46.4).

An undeclared import works in the development environment (something else brought the module) and fails
for a user who installs the package: typer 0.29 stopped bringing click, and `grpo-infra --help` broke.
The imports are read from the source (ast), so a module imported only inside a function counts too;
an import inside `try: ... except ImportError` is optional by construction and is not required.
"""

from __future__ import annotations

import ast
import importlib.metadata
import re
import sys
import tomllib
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("grpo_infra", "components")
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
PROJECT_NAME = PYPROJECT["project"]["name"]


def canonical(name: str) -> str:
    """PEP 503's normalized name: `PyYAML`, `pyyaml` and `py_yaml` are one project."""
    return re.sub(r"[-_.]+", "-", name).lower()


def requirement_name(requirement: str) -> str:
    return canonical(re.split(r"[\s\[=<>!~;]", requirement, maxsplit=1)[0])


def requirements() -> list[str]:
    """Every requirement of the core and of every extra, but the extras' references to this project."""
    project = PYPROJECT["project"]
    found = [*project["dependencies"], *(r for extra in project["optional-dependencies"].values() for r in extra)]
    return [r for r in found if requirement_name(r) != canonical(PROJECT_NAME)]


def _optional(handlers: list[ast.ExceptHandler]) -> bool:
    """An `except` that catches a failed import: the code runs without the module."""
    names = {"ImportError", "ModuleNotFoundError", "Exception", "BaseException"}
    for handler in handlers:
        caught = handler.type
        kinds = caught.elts if isinstance(caught, ast.Tuple) else [caught]
        if caught is None or any(isinstance(k, ast.Name) and k.id in names for k in kinds):
            return True
    return False


def _type_checking(node: ast.If) -> bool:
    """`if TYPE_CHECKING:`: imports for annotations only, never run."""
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def imported_modules(node: ast.AST, optional: bool = False) -> Iterator[tuple[str, int, bool]]:
    """(absolute module name, line, optional) for every import statement that runs, in `node` and below."""
    if isinstance(node, ast.Import):
        yield from ((alias.name, node.lineno, optional) for alias in node.names)
    elif isinstance(node, ast.ImportFrom):
        if node.level == 0 and node.module:
            yield node.module, node.lineno, optional
    elif isinstance(node, ast.Try):
        guarded = optional or _optional(node.handlers)
        for child in node.body:
            yield from imported_modules(child, guarded)
        for child in (*node.handlers, *node.orelse, *node.finalbody):
            yield from imported_modules(child, optional)
    elif isinstance(node, ast.If) and _type_checking(node):
        for child in node.orelse:
            yield from imported_modules(child, optional)
    else:
        for child in ast.iter_child_nodes(node):
            yield from imported_modules(child, optional)


def third_party_imports() -> dict[str, list[str]]:
    """Required third-party module → where it is imported (`path:line`)."""
    out: dict[str, list[str]] = {}
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
            for module, line, optional in imported_modules(tree):
                top = module.split(".")[0]
                if optional or top in sys.stdlib_module_names or top in PACKAGES:
                    continue
                out.setdefault(module, []).append(f"{path.relative_to(ROOT)}:{line}")
    return out


def distributions_of(module: str) -> set[str]:
    """The installed distributions that provide `module`.

    A namespace package (`google`) is shared by several distributions: the one holding the imported
    subpackage (`google.protobuf`: protobuf) is the one that provides it."""
    top = module.split(".")[0]
    candidates = importlib.metadata.packages_distributions().get(top, [])
    if len(candidates) <= 1 or "." not in module:
        return {canonical(c) for c in candidates}
    inner = "/".join(module.split(".")[:2])
    return {
        canonical(name)
        for name in candidates
        if any(str(f).startswith(f"{inner}/") or str(f) == f"{inner}.py" for f in importlib.metadata.files(name) or [])
    }


def pinned_by(distribution: str) -> set[str]:
    """The distributions `distribution` requires at an exact version, whatever the extras and platform."""
    try:
        wanted = importlib.metadata.requires(distribution) or []
    except importlib.metadata.PackageNotFoundError:
        return set()
    return {requirement_name(r) for r in wanted if ";" not in r and re.search(r"==[^,]+$", r)}


def test_every_third_party_import_is_declared() -> None:
    direct = {requirement_name(r) for r in requirements()}
    declared = direct.union(*(pinned_by(name) for name in direct))
    missing = []
    for module, places in sorted(third_party_imports().items()):
        providers = distributions_of(module)
        if not providers:
            missing.append(f"{module} ({', '.join(places)}): not installed here, so its distribution is unknown")
        elif not providers & declared:
            missing.append(
                f"{module} ({', '.join(places)}): from {sorted(providers)}, which pyproject does not declare"
            )
    assert missing == []


def test_every_declared_dependency_is_pinned_exactly() -> None:
    assert [r for r in requirements() if not re.fullmatch(r"[A-Za-z0-9_.\-]+(\[[a-z,\-]+\])?==[^,;]+", r)] == []
