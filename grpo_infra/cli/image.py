"""`grpo-infra image`: the job's image, made from the stack — `image lock` resolves and locks its Python set."""

from __future__ import annotations

import time
from typing import Annotated

import typer

from ..image import build as building
from ..image import lock as locking
from ..image.oci import OCIError
from .common import CHECK_FAILED, RootOption, console, fail, load, project_root

app = typer.Typer(
    help="The job's image: lock its Python set, build its CPU variant for the local cluster (docs/images.md).",
    no_args_is_help=True,
)

StackArgument = Annotated[str, typer.Argument(help="Stack name: stacks/Pulumi.<STACK>.yaml.")]


@app.command("lock")
def lock(
    stack: StackArgument,
    verify: Annotated[
        bool,
        typer.Option(
            "--verify",
            help="Write nothing: resolve again under the committed lock's pins and exit 1 unless every pin "
            "and hash still resolves on the index.",
        ),
    ] = False,
    root: RootOption = None,
) -> None:
    """Resolve STACK's image Python set for the image's platform and write stacks/locks/STACK.txt."""
    base = project_root(root)
    image = load(stack, base).environment.image
    if image.build is None:
        fail(f"{stack}: image.build is not set; a prebuilt image is not locked here (its maker locks it)")
    path = locking.lock_path(base, stack)
    started = time.monotonic()
    try:
        if verify:
            if image.build.lock is None:
                fail(f"{stack}: no lock at {path.relative_to(base)}; run `grpo-infra image lock {stack}`", CHECK_FAILED)
            problem = locking.verify(image, image.build.lock)
            if problem:
                fail(f"{path.relative_to(base)}: {problem}", CHECK_FAILED)
            console.print(
                f"{path.relative_to(base)}: every pin resolves ({len(locking.pins(image.build.lock))} packages, "
                f"{time.monotonic() - started:.1f}s)",
                highlight=False,
            )
            return
        text = locking.lock(image, stack)
    except locking.LockError as exc:
        fail(f"{stack}: {exc}", CHECK_FAILED)
    path.parent.mkdir(parents=True, exist_ok=True)
    unchanged = path.is_file() and path.read_text(encoding="utf-8") == text
    path.write_text(text, encoding="utf-8")
    console.print(
        f"{path.relative_to(base)}: {len(locking.pins(text))} packages for {locking.lock_inputs(image).platform}, "
        f"cpython {image.contents.python} ({'unchanged' if unchanged else 'written'}, "
        f"{time.monotonic() - started:.1f}s)",
        highlight=False,
    )


@app.command("build")
def build(
    stack: StackArgument,
    force: Annotated[
        bool, typer.Option("--force", help="Build again even when the cached archive is current.")
    ] = False,
    differences: Annotated[
        bool,
        typer.Option("--differences", help="Also print, package by package, what differs from the production image."),
    ] = False,
    root: RootOption = None,
) -> None:
    """Build STACK's image as a CPU variant (no CUDA, no registry, no Docker) into an OCI archive under
    ${GRPO_INFRA_CACHE:-~/.cache/grpo-infra}/images/, tagged with `image.ref`; cached by its contents."""
    base = project_root(root)
    env = load(stack, base).environment
    try:
        built = building.build(
            env, base, force=force, progress=lambda line: console.print(line, highlight=False, markup=False)
        )
    except (building.BuildError, OCIError) as exc:
        fail(f"{stack}: {exc}", CHECK_FAILED)
    state = "cached" if built.cached else "built"
    console.print(f"{env.image.ref}: {state} in {built.seconds:.1f}s -> {built.archive}", highlight=False)
    if differences:
        typer.echo(building.differences_markdown(env, built.record), nl=False)


@app.command("operators")
def operators() -> None:
    """Make the Kueue and KubeRay operator images from the locally built binaries (scripts/build-kube.sh),
    under the references their charts name; cached by the binaries' contents."""
    from ..kube import operator_images

    try:
        for path in operator_images.ensure_all(
            progress=lambda line: console.print(line, highlight=False, markup=False)
        ):
            console.print(str(path), highlight=False)
    except OCIError as exc:
        fail(str(exc), CHECK_FAILED)
