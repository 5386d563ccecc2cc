"""Everything a stack would apply, rendered to files in memory, then written in one move.

Rendering is pure (same spec, same bytes); writing happens only after every renderer succeeded,
so bad input never leaves a half-written tree behind.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from .spec import Environment

Render = Callable[[Environment], dict[str, str]]


@dataclass(frozen=True)
class Renderer:
    """One output of a stack: the folders under `DIR/STACK/` it owns, and when it applies."""

    name: str
    folders: tuple[str, ...]
    applies: Callable[[Environment], bool]
    render: Render


def _kubernetes(env: Environment) -> dict[str, str]:
    from .k8s import render_files

    return render_files(env)


def _slurm(env: Environment) -> dict[str, str]:
    from .slurmgen import render_files

    return render_files(env)


def _nodepools(env: Environment) -> dict[str, str]:
    from .nodepools.files import render_files

    return render_files(env)


def _image(env: Environment) -> dict[str, str]:
    from .image.dockerfile import render_files

    return render_files(env)


def _launcher(name: str) -> Renderer:
    """A launch path besides the target (Ray by hand, SkyPilot, dstack), rendered when the stack names it."""

    def render(env: Environment) -> dict[str, str]:
        from .launchers import RENDERERS

        return RENDERERS[name](env)

    return Renderer(name, (name,), lambda env: env.launchers is not None and name in env.launchers.declared(), render)


# Every output `synth` writes, one entry per renderer; a new target adds one line here.
REGISTRY: tuple[Renderer, ...] = (
    Renderer("kubernetes", ("kubernetes", "helm"), lambda env: env.target == "kubernetes", _kubernetes),
    Renderer("nodepools", ("nodepools",), lambda env: env.target == "kubernetes", _nodepools),
    Renderer("slurm", ("slurm",), lambda env: env.target == "slurm", _slurm),
    Renderer("image", ("image",), lambda env: env.image.build is not None, _image),
    *(_launcher(name) for name in ("ray", "skypilot", "dstack")),
)


def file_mode(text: str) -> int:
    """Scripts are executable; configuration is world-readable (slurmd and users read it)."""
    return 0o755 if text.startswith("#!") else 0o644


def renderers(env: Environment) -> list[Renderer]:
    """The registered renderers that apply to this environment."""
    return [r for r in REGISTRY if r.applies(env)]


def render(env: Environment) -> dict[str, str]:
    """All files of a stack, keyed by their path under `DIR/STACK/`, in sorted order.

    Each renderer writes only under its own folders, so two renderers can never overwrite each other."""
    files: dict[str, str] = {}
    for renderer in renderers(env):
        for path, text in renderer.render(env).items():
            if path.split("/", 1)[0] not in renderer.folders:
                raise RuntimeError(f"renderer {renderer.name} wrote {path}, outside its folders {renderer.folders}")
            files[path] = text
    return dict(sorted(files.items()))


def write_tree(files: dict[str, str], target: Path) -> None:
    """Replace `target` with exactly these files (stale files from an older synth disappear).

    The new tree is written beside the old one and swapped in by two renames: until the first, the old
    tree is untouched; if the second fails, the old tree is renamed back. A failure at any point leaves
    either the old tree or the new one, never a mix, and no staging directory behind.
    """
    target.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{target.name}.", dir=target.parent))
    retired = staging.with_name(f"{staging.name}.old")
    try:
        for rel, text in files.items():
            path = staging / rel
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text, encoding="utf-8")
            path.chmod(file_mode(text))
        had_old = target.exists()
        if had_old:
            os.replace(target, retired)
        try:
            os.replace(staging, target)
        except BaseException:
            if had_old:
                os.replace(retired, target)
            raise
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    shutil.rmtree(retired, ignore_errors=True)
