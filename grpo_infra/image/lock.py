"""The image's Python set, resolved and locked: what `grpo-infra image lock STACK` writes and `check` reads.

A build that runs `pip install verl[vllm]==X` resolves the set anew every time, against whatever
the index holds that day, and may not resolve at all: verl 0.9.1's `sglang` extra pins
`transformers==5.9.0` while sglang 0.5.12 pins `transformers==5.6.0` (their wheels' METADATA), so
pip reports ResolutionImpossible. The lock is made once, by the ordinary resolver (uv's
`pip compile`, pinned in pyproject.toml's dev extra), for the image's own platform — its CPython,
the glibc of its base's Ubuntu, x86_64 — with every package at an exact version and every file's
sha256; the build installs exactly that (`pip install --require-hashes --no-deps`).

The lock file is `stacks/locks/<stack>.txt`: pip's requirements format, under a header of `#`
lines stating the platform and the inputs it was resolved from (docs/images.md, "The lock").
`check` recomputes the inputs from `image.contents` and refuses a lock made from other inputs.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from ..spec.image import Image
from ..spec.load import lock_source
from .verl_releases import RELEASES

HEADER = "# grpo-infra image lock"
# glibc of each Ubuntu release an `nvidia/cuda:*-ubuntuXX.YY` base is built on (Ubuntu's glibc source
# package: noble 2.39, jammy 2.35, focal 2.31; https://launchpad.net/ubuntu/+source/glibc). The lock's
# wheels must not need a newer glibc than the image has (manylinux_2_X tags, PEP 600).
UBUNTU_GLIBC = {"24.04": "2.39", "22.04": "2.35", "20.04": "2.31"}
# The attention implementations verl can be told to build its FSDP models with
# (transformers' `attn_implementation`), and the distribution each needs beyond torch.
# verl 0.9.1's wheel pins flash-attn 2.8.3 (`Requires-Dist: flash-attn==2.8.3; extra ==
# "flash-attn-cu130torch211"`, pulled in by its `fsdp` extra).
ATTENTION_PACKAGE = {"flash_attention_2": "flash-attn"}
FLASH_ATTN = "flash-attn==2.8.3"
# Packages whose PyPI release is an sdist only and whose build imports torch: they are built in a build
# stage against the locked torch (`--no-build-isolation`), not installed with the rest. flash-attn
# 2.8.3's setup.py imports torch, setuptools, wheel's bdist_wheel and packaging, and declares
# setup_requires packaging, psutil, ninja; its PKG-INFO requires torch and einops.
SOURCE_BUILT = {"flash-attn": ("setuptools", "wheel", "packaging", "psutil", "ninja")}
# Wheels that write into a source-built package's folder, each installed in a step after that build so
# its files are the ones on disk. flash-attn-4 4.0.0b15's wheel is 47 modules under `flash_attn/cute/`
# and nothing else (flash_attn_4-4.0.0b15.dist-info/RECORD, top_level.txt `flash_attn`); flash-attn
# 2.8.3's setup.py installs every package under `flash_attn/`, `flash_attn/cute/` among them
# (`find_packages`, setup.py:529-540), and 20 of that folder's 21 modules have FA4's names
# (`__init__.py`, `interface.py`, `flash_fwd.py`, ...). sglang 0.5.12 requires flash-attn-4>=4.0.0b9
# (its wheel's METADATA) and imports it as `flash_attn.cute` for its `fa4` attention backend
# (sglang/jit_kernel/flash_attention_v4.py:10). Built after FA4, flash-attn 2.8.3 would replace those
# 20 files with its own older ones, leaving FA4's folder half of each; installed after flash-attn, FA4's
# whole folder is on disk (plus 2.8.3's `hopper_helpers.py`, which FA4 never imports), and flash-attn 2's
# own modules, outside `cute/`, which verl trains with, are untouched.
INSTALLED_AFTER = {"flash-attn-4": "flash-attn"}
FLASH_ATTN_REQUIRES = ("torch", "einops")
# What this project's gate modules import beyond the standard library (`python3 -m grpo_infra.cli nccl
# verdict` loads the CLI and the spec): the project's own dependencies without Pulumi's (pyproject.toml;
# tests/image/test_lock.py holds the two equal). The image installs the project's wheel --no-deps, so
# Pulumi's pins (packaging>=26, ...), which cannot co-resolve with verl's set, never enter it; these are
# resolved with verl's set instead, at whatever versions fit it.
# click (cli/common.py) and cryptography (kube/certs.py) are imported with the CLI though pyproject.toml
# has them only through typer and Pulumi: named here so the gate never depends on verl's set holding them.
IMPORTED_NOT_DECLARED = ("click", "cryptography")
GATE_REQUIREMENTS = (
    "pydantic",
    "jinja2",
    "pyyaml",
    "typer",
    "rich",
    "python-hostlist",
    "jsonschema",
    *IMPORTED_NOT_DECLARED,
)


@dataclass(frozen=True)
class LockInputs:
    """What a lock is resolved from: the top-level requirements, the overrides, the target platform."""

    requirements: tuple[str, ...]
    overrides: tuple[str, ...]
    python: str
    platform: str

    def digest(self) -> str:
        """A stable digest of the inputs: a lock is current exactly when its digest is this one."""
        text = "\n".join([self.python, self.platform, *self.requirements, "--", *self.overrides])
        return "sha256:" + hashlib.sha256(text.encode()).hexdigest()


class LockError(Exception):
    """The lock cannot be made or read: one line saying why."""


def ubuntu_release(image: Image) -> str | None:
    """The Ubuntu release of the build's base, from its tag (`nvidia/cuda:13.0.1-cudnn-devel-ubuntu24.04`)."""
    if image.build is None:
        return None
    found = re.search(r"ubuntu(\d{2}\.\d{2})", image.build.base)
    return found.group(1) if found else None


def python_platform(image: Image) -> str | None:
    """uv's `--python-platform` for the image: x86_64 with its base's glibc, or None when unknown."""
    glibc = UBUNTU_GLIBC.get(ubuntu_release(image) or "")
    return f"x86_64-manylinux_{glibc.replace('.', '_')}" if glibc else None


def engine_requirements(image: Image) -> list[str]:
    """verl with its engine extra, the engine, Ray and torch as the verl release pins them."""
    contents = image.contents
    lines = []
    if contents.verl is not None:
        extra = f"[{contents.engine.name}]" if contents.engine is not None else ""
        lines.append(f"verl{extra}=={contents.verl}")
    if contents.engine is not None:
        lines.append(f"{contents.engine.name}=={contents.engine.version}")
    lines.append(f"ray[default]=={contents.ray}")
    release = RELEASES.get(contents.verl or "")
    if release is not None and release.torch is not None and release.torch.startswith("=="):
        lines.append(f"torch{release.torch}")
    return lines


def attention_requirements(image: Image) -> list[str]:
    """The attention implementation's package and what its source build imports (flash-attn)."""
    if ATTENTION_PACKAGE.get(image.contents.attention) != "flash-attn":
        return []
    return [FLASH_ATTN, *SOURCE_BUILT["flash-attn"]]


# What building this project's wheel inside the image needs (`pip install --no-build-isolation`:
# pyproject.toml's build backend is setuptools.build_meta).
PROJECT_BUILD_REQUIREMENTS = ("setuptools",)


def gate_requirements(image: Image) -> list[str]:
    """The gate modules' imports and the project's build backend, when the image holds this project (`grpoInfra`)."""
    return [*GATE_REQUIREMENTS, *PROJECT_BUILD_REQUIREMENTS] if image.contents.grpo_infra else []


def overrides(image: Image) -> list[str]:
    """Pins that replace what a dependency asks for, as verl's own uv environment does.

    verl 0.9.1's `sglang` extra requires `transformers==5.9.0`, sglang 0.5.12 `transformers==5.6.0`,
    and verl's core `transformers!=5.6.0`: no set satisfies both. verl resolves it in its own uv
    project with `[tool.uv].override-dependencies` pinning transformers (docs/start/install.rst, "Install
    from custom environment (with uv)"); the lock does the same, with the version verl's extra names.
    """
    contents = image.contents
    if contents.verl == "0.9.1" and contents.engine is not None and contents.engine.name == "sglang":
        return ["transformers==5.9.0"]
    return []


def lock_inputs(image: Image) -> LockInputs:
    """The inputs of the image's lock; LockError when the image has no platform a lock can target."""
    platform = python_platform(image)
    if platform is None:
        base = image.build.base if image.build else "none"
        raise LockError(
            f"image.build.base {base} names no Ubuntu release with a known glibc "
            f"({', '.join(f'ubuntu{r}' for r in UBUNTU_GLIBC)}): the lock cannot target its platform"
        )
    return LockInputs(
        requirements=tuple(engine_requirements(image) + attention_requirements(image) + gate_requirements(image)),
        overrides=tuple(overrides(image)),
        python=image.contents.python,
        platform=platform,
    )


def header(inputs: LockInputs, stack: str, resolver: str) -> str:
    """The lock's `#` header: how to remake it, its platform, its inputs and their digest."""
    lines = [
        f"{HEADER} of stack {stack}: do not edit; change the stack and run `grpo-infra image lock {stack}`.",
        f"# platform: cpython {inputs.python}, {inputs.platform}",
        f"# resolver: {resolver}",
        f"# inputs: {inputs.digest()}",
        *(f"# requirement: {r}" for r in inputs.requirements),
        *(f"# override: {o}" for o in inputs.overrides),
    ]
    return "\n".join(lines) + "\n"


def stated_digest(lock: str) -> str | None:
    """The inputs digest a lock file states in its header, or None when it has none."""
    found = re.search(r"^# inputs: (sha256:[0-9a-f]{64})$", lock, re.MULTILINE)
    return found.group(1) if found else None


def pins(lock: str) -> dict[str, str]:
    """Every `name==version` the lock pins, by normalized name (PEP 503)."""
    out = {}
    for line in lock.splitlines():
        found = re.match(r"^([A-Za-z0-9][A-Za-z0-9._-]*)(\[[^\]]*\])?==([^\s;\\]+)", line)
        if found:
            out[normalize(found.group(1))] = found.group(3)
    return out


def normalize(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def blocks(lock: str) -> list[tuple[str, str]]:
    """(normalized name, text) of each requirement of the lock with its hash and comment lines."""
    out: list[tuple[str, list[str]]] = []
    for line in lock.splitlines():
        found = re.match(r"^([A-Za-z0-9][A-Za-z0-9._-]*)", line)
        if found:
            out.append((normalize(found.group(1)), [line]))
        elif out and line.startswith(" "):
            out[-1][1].append(line)
    return [(name, "\n".join(text) + "\n") for name, text in out]


def split(lock: str) -> tuple[str, str, str]:
    """(installed from wheels, built from source, installed after the source build): the lock's
    requirements in the build's three steps (INSTALLED_AFTER)."""
    header_lines = [line for line in lock.splitlines() if line.startswith("#") and not line.startswith("#    ")]
    head = "\n".join(line for line in header_lines if line.startswith(HEADER) or line.startswith("# platform")) + "\n"
    wheels, source, after = [head], [head], [head]
    built = {name for name, _ in blocks(lock) if name in SOURCE_BUILT}
    for name, text in blocks(lock):
        if name in SOURCE_BUILT:
            source.append(text)
        elif INSTALLED_AFTER.get(name) in built:
            after.append(text)
        else:
            wheels.append(text)
    return "".join(wheels), "".join(source), "".join(after)


def uv_binary() -> str:
    """uv from the running Python's environment (the dev extra pins it), else from PATH."""
    beside = Path(sys.executable).with_name("uv")
    found = str(beside) if beside.is_file() else shutil.which("uv")
    if found is None:
        raise LockError("uv is not installed (pip install the project's dev extra: it pins uv)")
    return found


def uv_version(uv: str) -> str:
    return subprocess.run([uv, "--version"], capture_output=True, text=True, check=True).stdout.strip()


def dependency_metadata(image: Image) -> str:
    """uv's static metadata for sdist-only packages, so resolving never runs their torch-importing setup.py."""
    if "flash-attn" not in {normalize(r.split("==")[0]) for r in attention_requirements(image)}:
        return ""
    version = FLASH_ATTN.split("==")[1]
    requires = ", ".join(f'"{r}"' for r in FLASH_ATTN_REQUIRES)
    return f'[[dependency-metadata]]\nname = "flash-attn"\nversion = "{version}"\nrequires-dist = [{requires}]\n'


def compile_command(uv: str, inputs: LockInputs, *, constraints: bool) -> list[str]:
    """`uv pip compile` for the image's platform, with hashes, run in a folder of its input files."""
    command = [uv, "pip", "compile", "requirements.in", "--config-file", "uv.toml"]
    command += ["--python-platform", inputs.platform, "--python-version", inputs.python]
    command += ["--generate-hashes", "--no-header", "--quiet", "--output-file", "requirements.txt"]
    if inputs.overrides:
        command += ["--overrides", "overrides.txt"]
    if constraints:
        command += ["--constraints", "constraints.txt"]
    return command


def resolver_environment(environ: Mapping[str, str]) -> dict[str, str]:
    """uv's environment: never download a Python (the resolver targets the image's version, not an
    interpreter here), and trust the machine's certificate store as pip does (its truststore default), so
    a TLS-inspecting proxy whose CA is in that store works without SSL_CERT_FILE. uv alone trusts only its
    bundled roots ("invalid peer certificate: UnknownIssuer"); `UV_SYSTEM_CERTS=0` turns this off."""
    return {**environ, "UV_PYTHON_DOWNLOADS": "never", "UV_SYSTEM_CERTS": environ.get("UV_SYSTEM_CERTS", "1")}


def resolve(image: Image, *, pinned: str | None = None, uv: str | None = None) -> str:
    """The resolved requirements (no header) of the image's Python set; with `pinned`, held to its pins.

    LockError with the resolver's own explanation when the set does not resolve.
    """
    inputs = lock_inputs(image)
    uv = uv or uv_binary()
    with tempfile.TemporaryDirectory(prefix="grpo-infra-lock-") as tmp:
        folder = Path(tmp)
        (folder / "requirements.in").write_text("\n".join(inputs.requirements) + "\n", encoding="utf-8")
        (folder / "overrides.txt").write_text("\n".join(inputs.overrides) + "\n", encoding="utf-8")
        (folder / "uv.toml").write_text(dependency_metadata(image), encoding="utf-8")
        if pinned is not None:
            lines = [f"{name}=={version}" for name, version in sorted(pins(pinned).items())]
            (folder / "constraints.txt").write_text("\n".join(lines) + "\n", encoding="utf-8")
        run = subprocess.run(
            compile_command(uv, inputs, constraints=pinned is not None),
            cwd=folder,
            capture_output=True,
            text=True,
            env=resolver_environment(os.environ),
        )
        if run.returncode != 0:
            reason = " ".join(line.strip() for line in run.stderr.splitlines() if not line.startswith("warning:"))
            raise LockError(f"the image's Python set does not resolve: {reason}")
        return (folder / "requirements.txt").read_text(encoding="utf-8")


def lock(image: Image, stack: str, uv: str | None = None) -> str:
    """The full lock file of the image: header, then every package with its hashes."""
    uv = uv or uv_binary()
    inputs = lock_inputs(image)
    return header(inputs, stack, f"{uv_version(uv)} pip compile --generate-hashes") + resolve(image, uv=uv)


def lock_path(root: Path, stack: str) -> Path:
    """Where the stack's lock is committed: `stacks/locks/<stack>.txt` of the project at `root`."""
    return root / lock_source(stack)


def hashes(lock: str) -> dict[str, set[str]]:
    """Every package's file hashes in the lock, by normalized name."""
    return {name: set(re.findall(r"--hash=(sha256:[0-9a-f]{64})", text)) for name, text in blocks(lock)}


def stale(image: Image, lock: str) -> str | None:
    """Why the lock does not belong to `image.contents` (offline), or None when it does."""
    try:
        inputs = lock_inputs(image)
    except LockError as exc:
        return str(exc)
    stated = stated_digest(lock)
    if stated is None:
        return "has no `# inputs:` header: not written by `grpo-infra image lock`"
    if stated != inputs.digest():
        wanted = ", ".join(inputs.requirements + tuple(f"override {o}" for o in inputs.overrides))
        return f"was resolved from other inputs than image.contents now asks ({wanted}, {inputs.platform})"
    pinned = pins(lock)
    for requirement in inputs.requirements:
        name, _, version = requirement.partition("==")
        name = normalize(name.split("[")[0])
        if version and pinned.get(name) != version:
            return f"pins {name} {pinned.get(name, 'nowhere')}, image.contents asks {version}"
    return None


def verify(image: Image, lock: str, uv: str | None = None) -> str | None:
    """Why the lock no longer installs from the index (re-resolved under its own pins), or None."""
    problem = stale(image, lock)
    if problem:
        return problem
    try:
        again = resolve(image, pinned=lock, uv=uv)
    except LockError as exc:
        return str(exc)
    before, after = pins(lock), pins(again)
    if before != after:
        moved = sorted(n for n in before.keys() | after.keys() if before.get(n) != after.get(n))
        shown = ", ".join(f"{n} {before.get(n, '-')} → {after.get(n, '-')}" for n in moved[:5])
        return f"the index resolves {len(moved)} pins differently now: {shown}"
    now = hashes(again)
    gone = sorted(n for n, locked in hashes(lock).items() if not locked <= now.get(n, set()))
    if gone:
        return f"files the lock hashes are no longer on the index for {', '.join(gone[:5])}"
    return None
