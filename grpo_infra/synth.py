"""Everything a stack would apply, rendered to files in memory, then written in one move.

Rendering is pure (same spec, same bytes); writing happens only after every renderer succeeded,
so bad input never leaves a half-written tree behind.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path

from .spec import Environment

Renderer = Callable[[Environment], dict[str, str]]


def file_mode(text: str) -> int:
    """Scripts are executable; configuration is world-readable (slurmd and users read it)."""
    return 0o755 if text.startswith("#!") else 0o644


def renderers(env: Environment) -> list[Renderer]:
    """The renderers that apply to this environment's target."""
    from .launchers import render_files as launcher_files

    if env.target == "kubernetes":
        from .k8s import render_files as kubernetes_files

        return [kubernetes_files, launcher_files]
    from .slurmgen import render_files as slurm_files

    return [slurm_files, launcher_files]


def render(env: Environment) -> dict[str, str]:
    """All files of a stack, keyed by their path under `DIR/STACK/`, in sorted order."""
    files: dict[str, str] = {}
    for renderer in renderers(env):
        for path, text in renderer(env).items():
            if path in files:
                raise RuntimeError(f"two renderers both write {path}")
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
