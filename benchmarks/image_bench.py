"""The local cluster's images, in numbers: the stack's CPU image cold and warm, the operator images.

Cold is the build of an archive that is not cached (`--cold` forces one now; otherwise the time the
last cold build recorded in its record JSON); warm is a second `build` of the same recipe (a cache
hit). Not a test: `python benchmarks/image_bench.py [STACK] [--cold]` (root, debootstrap).
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

from grpo_infra.image import build
from grpo_infra.image.oci import OCIError
from grpo_infra.kube import operator_images
from grpo_infra.spec import load_stack

ROOT = Path(__file__).resolve().parents[1]


def mib(path: Path) -> str:
    return f"{path.stat().st_size / 2**20:.0f} MiB"


def main(argv: list[str]) -> None:
    stack = next((a for a in argv if not a.startswith("-")), "local-k8s")
    env = load_stack(stack, ROOT).environment
    if "--cold" in argv:
        started = time.monotonic()
        cold = build.build(env, ROOT, force=True, progress=print)
        print(f"cold build (now): {time.monotonic() - started:.0f} s")
    cold = build.build(env, ROOT, progress=print)
    print(f"{stack} CPU image: {cold.archive.name} ({mib(cold.archive)})")
    base, upper = cold.record.get("baseSeconds"), cold.record.get("upperSeconds")
    if base is not None and upper is not None:
        print(f"cold build: base layer {base:.0f} s (debootstrap, pip, packing) + upper layer {upper:.0f} s")
        print(f"after a change to this checkout (base cached): {upper:.0f} s")
    print(f"this archive's build (recorded): {cold.record['builtSeconds']:.0f} s")
    runs = []
    for _ in range(3):
        started = time.monotonic()
        build.build(env, ROOT)
        runs.append(time.monotonic() - started)
    print(f"warm build (cache hit, best of 3): {min(runs):.2f} s")
    for image in operator_images.operator_images():
        try:
            archive = image.archive()
            was = archive.is_file()
            started = time.monotonic()
            operator_images.ensure(image)
            print(f"{image.ref}: {mib(archive)}, {'warm' if was else 'cold'} {time.monotonic() - started:.1f} s")
        except OCIError as exc:
            print(f"{image.ref}: {exc}")


if __name__ == "__main__":
    main(sys.argv[1:])
