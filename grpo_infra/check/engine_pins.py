"""The image's lock holds a transformers outside what its rollout engine's own wheel requires.

verl 0.9.1 with SGLang cannot resolve as its wheels state: verl's `sglang` extra pins
`transformers==5.9.0`, sglang 0.5.12 `transformers==5.6.0` (grpo_infra/image/lock.py, `overrides`). The
lock overrides sglang's pin, as verl's own uv environment does, so the image runs sglang on a
transformers release sglang was not released against. Nothing fails at `check`; the user is told.
"""

from __future__ import annotations

from ..image.lock import overrides, pins
from ..image.verl_releases import satisfies
from ..spec import ENVIRONMENT_KEY, Environment
from .violation import Violation

# Engine release → its wheel's `Requires-Dist: transformers...` (the specifier).
# sglang 0.5.12: sglang-0.5.12.dist-info/METADATA `Requires-Dist: transformers==5.6.0`
# (sglang-0.5.12-cp311-cp311-manylinux_2_34_x86_64.whl, the release the shipped SGLang locks pin).
ENGINE_TRANSFORMERS: dict[tuple[str, str], str] = {("sglang", "0.5.12"): "==5.6.0"}


def engine_pin_warnings(env: Environment) -> list[Violation]:
    """One warning when the built image's lock pins transformers outside the engine's own requirement."""
    engine, build = env.image.contents.engine, env.image.build
    if engine is None or build is None or build.lock is None:
        return []
    wanted = ENGINE_TRANSFORMERS.get((engine.name, engine.version))
    locked = pins(build.lock).get("transformers")
    if wanted is None or locked is None or satisfies(locked, wanted):
        return []
    why = " (the lock's override: verl's own pin)" if f"transformers=={locked}" in overrides(env.image) else ""
    return [
        Violation(
            "image-engine-transformers",
            f"{ENVIRONMENT_KEY}.image.contents.engine",
            f"{engine.name} {engine.version} requires transformers{wanted} (its wheel's METADATA) but the lock "
            f"installs transformers {locked}{why}: {engine.name} "
            "runs on a transformers it was not released against",
        )
    ]
