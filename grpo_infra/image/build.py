"""`grpo-infra image build STACK`: the CPU variant of the stack's image, built here as an OCI archive.

The production image (`image/Dockerfile`, grpo_infra/image/dockerfile.py) needs a CUDA base and a
registry; the local cluster's nodes have neither GPUs nor a registry. This builds, from the same
`image.contents` and the same lock, the image those nodes run: a `debootstrap --variant=minbase`
root of Debian 12 (the Debian release whose CPython verl accepts; see SUITE), a virtual environment
at /opt/venv with the stated Ray and its dependencies at the lock's versions, verl and the engine at
the stated versions without their GPU dependencies, and grpo-infra from this checkout (`--no-deps`).
No CUDA, no torch, no engine kernels: `differences()` lists, package by package, what differs from the production image.

Two layers: the base (Debian, Ray, verl, the engine), cached under a key without this checkout's
files, and grpo-infra with the guard on top, so a code change rebuilds in seconds, not minutes.
The archive is written under the image's own reference (`image.ref`, what the rendered pods name)
to `${GRPO_INFRA_CACHE:-~/.cache/grpo-infra}/images/`, named by a hash of everything that decides
its contents, so a second build of the same contents is a cache hit. The build's last step runs the
runtime guard (grpo_infra/image/guard.py) inside the new root against the variant's declaration,
as the Dockerfile's last step does: a root that does not hold what is declared is never packed.

Needs root (debootstrap, chroot, mount namespaces) and the Debian packages `debootstrap` and, for
running an archive (`grpo_infra.image.oci.run_in_container`), `umoci` and `runc` (scripts/install-system-deps.sh).
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from ..spec import Environment
from . import guard_program
from .dockerfile import RDMA_PACKAGES, VENV, rdma_userspace
from .lock import engine_requirements, normalize, pins
from .oci import ImageConfig, Layer, cache_dir, pack, write_layer
from .variant import SUITE, SUITE_PYTHON, variant_guard_args

# Bump when the recipe below changes what a build of the same inputs holds.
RECIPE = "cpu-variant-1"
# The tools the job's shell steps and the pods call (the production Dockerfile's list, without the
# compilers and git that only its source builds need): bash (in minbase), ip, pkill/ps, curl.
APT_PACKAGES = ("python3", "python3-venv", "ca-certificates", "curl", "iproute2", "procps")
GRPO_DIR = "/opt/grpo-infra"
# The root's CA bundle: the host's while the build's pip runs, Debian's own in the image.
ROOT_CA_BUNDLE = "/etc/ssl/certs/ca-certificates.crt"
GUARD_FILE = "image_guard.py"
Progress = Callable[[str], None]


class BuildError(Exception):
    """A step of the build failed; the message is the one line to show."""


@dataclass(frozen=True)
class Recipe:
    """Everything that decides what the CPU image holds; its hash names the archive."""

    ref: str
    suite: str
    apt: tuple[str, ...]
    # Installed with their dependencies (Ray), and without (verl, the engine: theirs need GPUs).
    with_deps: tuple[str, ...]
    without_deps: tuple[str, ...]
    # The stack's lock as pip constraints: every package both images hold is at the locked version.
    constraints: tuple[str, ...]
    grpo_infra_source: str
    guard: str
    recipe: str = RECIPE

    def key(self) -> str:
        return hashlib.sha256(json.dumps(asdict(self), sort_keys=True).encode()).hexdigest()[:20]


def source_root() -> Path:
    """Where the grpo_infra package that runs this command lives: a checkout (with its pyproject.toml), or the
    site-packages of an installed wheel. The image gets this code, whatever project's stacks it is built for
    (`--root`: a team's own project holds stacks, not grpo-infra's source)."""
    return Path(__file__).resolve().parents[2]


def _pyproject(root: Path) -> str:
    """The checkout's pyproject.toml; for an installed wheel, one that installs the same package and its files."""
    if (root / "pyproject.toml").is_file():
        return (root / "pyproject.toml").read_text()
    from importlib.metadata import version

    return (
        '[build-system]\nrequires = ["setuptools>=68"]\nbuild-backend = "setuptools.build_meta"\n\n'
        f'[project]\nname = "grpo-infra"\nversion = "{version("grpo-infra")}"\n\n'
        '[tool.setuptools.packages.find]\ninclude = ["grpo_infra*"]\n\n'
        '[tool.setuptools.package-data]\ngrpo_infra = ["**/*"]\n'
    )


def _package_files(root: Path) -> list[Path]:
    return sorted(
        p
        for p in (root / "grpo_infra").rglob("*")
        if p.is_file() and "__pycache__" not in p.parts and p.suffix != ".pyc"
    )


def source_hash(root: Path) -> str:
    """A hash of the package's installable files (grpo_infra/, its pyproject): a change rebuilds."""
    digest = hashlib.sha256(b"pyproject.toml\0" + _pyproject(root).encode() + b"\0")
    for path in _package_files(root):
        digest.update(path.relative_to(root).as_posix().encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()


def recipe(env: Environment, project: Path) -> Recipe:
    """The CPU image's recipe from the stack's `image.contents` (the same pins `requirements.txt` holds)."""
    if env.image.ref is None:
        raise BuildError("the stack's image has no `ref`: nothing names the image the pods would run")
    pinned = engine_requirements(env.image)
    with_deps = tuple(p for p in pinned if p.startswith("ray["))
    # verl's engine extra and torch are its GPU half; the engine itself is kept as its own distribution.
    without_deps = tuple(
        p.split("[")[0] + p[p.index("]") + 1 :] if "[" in p else p
        for p in pinned
        if not p.startswith(("ray[", "torch"))
    )
    lock = env.image.build.lock if env.image.build is not None else None
    constraints = tuple(f"{name}=={version}" for name, version in sorted(pins(lock).items())) if lock else ()
    return Recipe(
        ref=env.image.ref,
        suite=SUITE,
        apt=apt_packages(env),
        with_deps=with_deps,
        without_deps=without_deps,
        constraints=constraints,
        grpo_infra_source=source_hash(source_root()),
        guard=hashlib.sha256(guard_program().encode()).hexdigest(),
    )


def apt_packages(env: Environment) -> tuple[str, ...]:
    """The Debian packages of the root file system: the job's, and the RDMA verbs userspace wherever the
    production image installs it (`dockerfile.rdma_userspace`; the same package names in Debian bookworm as
    in Ubuntu noble), so the guard's verbs check at build and on the nodes reads a real libibverbs."""
    return APT_PACKAGES + (RDMA_PACKAGES if rdma_userspace(env) else ())


def slug(ref: str) -> str:
    """A file-name form of a reference: `localhost:5000/grpo/verl:tag` → `localhost_5000_grpo_verl_tag`."""
    return "".join(c if c.isalnum() or c in "-." else "_" for c in ref)


def archive_path(plan: Recipe) -> Path:
    return cache_dir() / f"{slug(plan.ref)}-{plan.key()}.oci.tar"


def record_path(plan: Recipe) -> Path:
    return archive_path(plan).with_suffix("").with_suffix(".json")


@dataclass
class Built:
    """A built (or cached) image: its archive, its record, and whether this call built it."""

    archive: Path
    record: dict[str, Any]
    cached: bool
    seconds: float


def _run(cmd: list[str], log: Path, what: str) -> str:
    with log.open("a") as out:
        out.write(f"$ {' '.join(cmd)}\n")
        out.flush()
        proc = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        out.write(proc.stdout)
    if proc.returncode != 0:
        tail = [ln for ln in proc.stdout.strip().splitlines() if ln.strip()][-1:] or ["(no output)"]
        raise BuildError(f"{what} failed (exit {proc.returncode}): {tail[0].strip()} (log: {log})")
    return proc.stdout


def in_root(root: Path, command: str) -> list[str]:
    """A shell command run chrooted in `root`, with /proc mounted in a private mount namespace (gone when
    the command ends, so a crash leaves no mount behind) and the host's resolver for the package index."""
    script = f'mount -t proc proc "{root}/proc" && exec chroot "{root}" /bin/sh -c "$0"'
    return ["unshare", "--mount", "--propagation", "private", "--fork", "sh", "-c", script, command]


def _debootstrap(root: Path, apt: tuple[str, ...], log: Path, say: Progress) -> None:
    """`debootstrap --variant=minbase SUITE` with the packages the job needs, its progress line by line."""
    cmd = ["debootstrap", "--variant=minbase", f"--include={','.join(apt)}", SUITE, str(root)]
    with log.open("a") as out:
        out.write(f"$ {' '.join(cmd)}\n")
        out.flush()
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        assert proc.stdout is not None
        last = ""
        for line in proc.stdout:
            out.write(line)
            phase = line.strip()
            # Each package is retrieved, validated, unpacked and configured: show the phase, not every line.
            head = phase.split()[1] if phase.startswith("I: ") and len(phase.split()) > 1 else ""
            if head and head != last and not phase.startswith("I: Validating"):
                say(f"  debootstrap: {phase.removeprefix('I: ')}")
                last = head
        code = proc.wait()
    if code != 0:
        raise BuildError(f"debootstrap {SUITE} failed (exit {code}); see {log}")


def host_trust_store() -> str:
    """The CA bundle this machine's pip trusts (a TLS-inspecting proxy's CA may be in it, not in the
    new root's own bundle). pip reads the system store (its truststore default), so the bundle is
    swapped in while pip runs and Debian's is put back before the root is packed."""
    for name in ("PIP_CERT", "REQUESTS_CA_BUNDLE", "SSL_CERT_FILE"):
        value = os.environ.get(name)
        if value and Path(value).is_file():
            return value
    return "/etc/ssl/certs/ca-certificates.crt"


def _strip(root: Path) -> None:
    """Drop what only the build needed: apt's caches and lists, the resolver copy, scratch files."""
    for pattern in ("var/cache/apt/*", "var/lib/apt/lists/*", "tmp/*", "var/log/*.log", "root/.cache"):
        for path in root.glob(pattern):
            shutil.rmtree(path) if path.is_dir() and not path.is_symlink() else path.unlink()
    (root / "etc/resolv.conf").unlink(missing_ok=True)


def _copy_source(root: Path, target: Path) -> None:
    target.mkdir(parents=True)
    (target / "pyproject.toml").write_text(_pyproject(root))
    shutil.copytree(root / "grpo_infra", target / "grpo_infra", ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    # setuptools' package discovery names components*: an empty tree keeps its metadata valid.
    (target / "components").mkdir()


def _inventory(root: Path, log: Path) -> tuple[dict[str, str], dict[str, str]]:
    """(Debian packages, Python distributions) installed in the root, name → version."""
    dpkg = _run(in_root(root, "dpkg-query -W -f '${Package} ${Version}\\n'"), log, "dpkg-query")
    pip = _run(in_root(root, f"{VENV}/bin/python -m pip list --format=json"), log, "pip list")
    debs = dict(line.split(" ", 1) for line in dpkg.strip().splitlines() if " " in line)
    wheels = {d["name"].lower().replace("_", "-"): d["version"] for d in json.loads(pip[pip.index("[") :])}
    return debs, wheels


def base_key(plan: Recipe) -> str:
    """The key of everything but this checkout's own files: the base layer is reused across code changes."""
    fields = {k: v for k, v in asdict(plan).items() if k != "grpo_infra_source"}
    return hashlib.sha256(json.dumps(fields, sort_keys=True).encode()).hexdigest()[:20]


def _pip() -> str:
    return (
        f"PIP_FIND_LINKS= PIP_CERT= {VENV}/bin/python -m pip install --no-cache-dir --progress-bar off"
        " --disable-pip-version-check"
    )


class _HostTrust:
    """The host's resolver and CA bundle inside the root while pip reaches the package index; Debian's
    bundle and no resolver afterwards (the kubelet mounts the pod's resolv.conf)."""

    def __init__(self, root: Path, scratch: Path) -> None:
        self.root, self.saved = root, scratch / "debian-ca-certificates.crt"
        self.bundle = root / ROOT_CA_BUNDLE.lstrip("/")

    def __enter__(self) -> None:
        shutil.copy2("/etc/resolv.conf", self.root / "etc/resolv.conf")
        shutil.copy2(self.bundle, self.saved)
        shutil.copy2(host_trust_store(), self.bundle)

    def __exit__(self, *exc: object) -> None:
        shutil.copy2(self.saved, self.bundle)
        (self.root / "etc/resolv.conf").unlink(missing_ok=True)


def _base(plan: Recipe, log: Path, say: Progress) -> tuple[Path, Layer]:
    """The lower layer: Debian minbase, the venv with Ray (locked versions), verl and the engine.

    Cached in `images/base/` under `base_key`, as its root (the upper layer is built on a copy) and
    its packed layer, so a change to this checkout rebuilds only the upper layer."""
    home = cache_dir() / "base" / f"{slug(plan.ref)}-{base_key(plan)}"
    if (home / "layer.json").is_file() and (home / "rootfs").is_dir():
        say(f"  base layer cached ({home})")
        return home / "rootfs", Layer.from_json(json.loads((home / "layer.json").read_text()))
    started = time.monotonic()
    for stale in home.parent.glob(f"{slug(plan.ref)}-*"):
        shutil.rmtree(stale, ignore_errors=True)
    partial = home.with_name(home.name + ".partial")
    shutil.rmtree(partial, ignore_errors=True)
    root = partial / "rootfs"
    partial.mkdir(parents=True)
    t = time.monotonic()
    _debootstrap(root, plan.apt, log, say)
    say(f"  root file system in {time.monotonic() - t:.0f}s")
    t = time.monotonic()
    with _HostTrust(root, partial):
        (root / "tmp/constraints.txt").write_text("".join(f"{c}\n" for c in plan.constraints))
        locked = f"the lock's {len(plan.constraints)} pins as constraints" if plan.constraints else "no lock"
        say(f"  python {SUITE_PYTHON} venv at {VENV}: {' '.join(plan.with_deps)} with dependencies ({locked})")
        ray_step = f"python3 -m venv {VENV} && {_pip()} -c /tmp/constraints.txt {' '.join(plan.with_deps)}"
        _run(in_root(root, ray_step), log, "pip install ray")
        say(f"  {' '.join(plan.without_deps)} without dependencies (their GPU half)")
        _run(in_root(root, f"{_pip()} --no-deps {' '.join(plan.without_deps)}"), log, "pip install verl")
    say(f"  Python packages in {time.monotonic() - t:.0f}s")
    _strip(root)
    t = time.monotonic()
    say("  packing the base layer")
    layer = write_layer(root, partial / "layer.tar.gz", lambda n: say(f"    {n / 2**20:.0f} MiB packed"))
    say(f"  base layer {layer.size / 2**20:.0f} MiB in {time.monotonic() - t:.0f}s")
    partial.rename(home)
    layer = Layer(home / "layer.tar.gz", layer.digest, layer.diff_id, layer.size)
    (home / "layer.json").write_text(json.dumps({**layer.as_json(), "seconds": round(time.monotonic() - started, 1)}))
    return home / "rootfs", layer


def base_seconds(plan: Recipe) -> float | None:
    """How long the cached base layer of `plan` took to build (debootstrap, pip, packing), if recorded."""
    meta = cache_dir() / "base" / f"{slug(plan.ref)}-{base_key(plan)}" / "layer.json"
    return json.loads(meta.read_text()).get("seconds") if meta.is_file() else None


# Archives kept per reference: several checkouts (worktrees, branches) share the cache, each with its own.
KEEP = 4


def _keep_newest(cache: Path, ref: str) -> None:
    """Drop all but the KEEP most recently built archives of `ref` (and their records)."""
    archives = sorted(cache.glob(f"{slug(ref)}-*.oci.tar"), key=lambda p: p.stat().st_mtime, reverse=True)
    for old in archives[KEEP:]:
        old.unlink(missing_ok=True)
        old.with_suffix("").with_suffix(".json").unlink(missing_ok=True)


def _snapshot(tree: Path) -> dict[Path, tuple[int, int]]:
    return {p: (p.lstat().st_size, p.lstat().st_mtime_ns) for p in tree.rglob("*")}


def build(env: Environment, project: Path, *, progress: Progress | None = None, force: bool = False) -> Built:
    """Build the stack's CPU image into the cache, or return the cached archive of the same recipe.

    Builds into one cache are taken one at a time (a lock file in it): two callers at once, such as the
    test command's two parts running side by side or two checkouts, build an image once, and the second
    finds it cached instead of writing the same base layer and archive over the first."""
    cache = cache_dir()
    cache.mkdir(parents=True, exist_ok=True)
    with (cache / ".build.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        return _build(env, project, progress=progress, force=force)


def _build(env: Environment, project: Path, *, progress: Progress | None, force: bool) -> Built:
    say = progress or (lambda _line: None)
    started = time.monotonic()
    plan = recipe(env, project)
    archive, record_file = archive_path(plan), record_path(plan)
    if not force and archive.is_file() and record_file.is_file():
        say(f"cached: {archive} ({plan.ref})")
        return Built(archive, json.loads(record_file.read_text()), True, time.monotonic() - started)
    if os.geteuid() != 0:
        raise BuildError("building the image needs root (debootstrap, chroot, mount namespaces)")
    for tool in ("debootstrap", "unshare", "chroot", "cp"):
        if shutil.which(tool) is None:
            raise BuildError(f"{tool} not found: run scripts/install-system-deps.sh as root")
    cache = cache_dir()
    logs = cache / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    log = logs / f"{plan.key()}.log"
    log.write_text("")
    say(f"building {plan.ref} (CPU variant, {SUITE} minbase, key {plan.key()}; log {log})")
    if force:
        shutil.rmtree(cache / "base" / f"{slug(plan.ref)}-{base_key(plan)}", ignore_errors=True)
    base_cached = (cache / "base" / f"{slug(plan.ref)}-{base_key(plan)}" / "layer.json").is_file()
    base_root, base_layer = _base(plan, log, say)
    upper_started = time.monotonic()
    work = Path(tempfile.mkdtemp(dir=cache, prefix=f".build-{plan.key()}-"))
    root = work / "rootfs"
    try:
        # The upper layer: this checkout's grpo-infra and the guard, on a copy of the base root.
        _run(["cp", "-a", str(base_root), str(root)], log, "copying the base root")
        opt = root / "opt"
        before = _snapshot(opt)
        with _HostTrust(root, work):
            _copy_source(source_root(), root / "tmp/grpo-infra-src")
            say(f"  grpo-infra from {source_root()} (--no-deps)")
            _run(in_root(root, f"{_pip()} --no-deps /tmp/grpo-infra-src"), log, "pip install grpo-infra")
        (root / GRPO_DIR.lstrip("/")).mkdir(parents=True, exist_ok=True)
        (root / GRPO_DIR.lstrip("/") / GUARD_FILE).write_text(guard_program())
        check = " ".join(variant_guard_args(env, gpu_node=False))  # the image alone: no node here
        say("  runtime guard inside the new root")
        for line in _run(
            in_root(root, f"PATH={VENV}/bin:$PATH python3 {GRPO_DIR}/{GUARD_FILE} {check}"), log, "image guard"
        ).splitlines():
            say(f"    {line}")
        debs, wheels = _inventory(root, log)
        _strip(root)
        changed = [p for p, stat in _snapshot(opt).items() if before.get(p) != stat]
        gone = [p for p in before if not os.path.lexists(p)]
        if gone:
            raise BuildError(f"the upper layer would delete {gone[0]} (whiteouts are not written)")
        top = write_layer(root, work / "top.tar.gz", paths=changed)
        say(f"  upper layer: {len(changed)} paths, {top.size / 2**20:.1f} MiB")
        config = ImageConfig(
            cmd=["/bin/bash"],
            env={
                "PATH": f"{VENV}/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
                "VIRTUAL_ENV": VENV,
            },
            labels={
                "org.opencontainers.image.title": "grpo-infra verl image, CPU variant",
                "io.grpo-infra.variant": "cpu",
                "io.grpo-infra.ray": env.image.contents.ray,
                "io.grpo-infra.recipe": plan.key(),
            },
        )
        t = time.monotonic()
        digest = pack([base_layer, top], plan.ref, archive, config)
        say(f"  archive {archive.stat().st_size / 2**20:.0f} MiB in {time.monotonic() - t:.0f}s")
        record = {
            "ref": plan.ref,
            "key": plan.key(),
            "baseKey": base_key(plan),
            "manifest": digest,
            "recipe": asdict(plan),
            "guardArgs": variant_guard_args(env, gpu_node=False),
            "debian": debs,
            "python": wheels,
            "builtSeconds": round(time.monotonic() - started, 1),
            "baseCached": base_cached,
            "baseSeconds": base_seconds(plan),
            "upperSeconds": round(time.monotonic() - upper_started, 1),
        }
        record_file.write_text(json.dumps(record, indent=1, sort_keys=True) + "\n")
        _keep_newest(cache, plan.ref)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    say(f"built {plan.ref} in {time.monotonic() - started:.0f}s: {archive}")
    return Built(archive, record, False, time.monotonic() - started)


def production_apt(env: Environment) -> list[str]:
    """The Debian packages the production Dockerfile installs by name, read from the rendered file."""
    from .dockerfile import dockerfile

    text = dockerfile(env).replace("\\\n", " ")
    names: list[str] = []
    for found in re.finditer(r"apt-get install -y --no-install-recommends ([^&]+)", text):
        names += [n for n in found.group(1).split() if re.fullmatch(r"[a-z0-9][a-z0-9.+-]+", n)]
    return list(dict.fromkeys(names))


def differences(env: Environment, record: dict[str, Any]) -> list[tuple[str, str, str, str]]:
    """(kind, package, production, CPU variant) for every package whose presence or version differs.

    Production is what the Dockerfile names (its base and apt lines) and what the stack's lock pins;
    the variant is what its build recorded (`dpkg-query`, `pip list` inside the root). Identical
    entries are left out, so the table is exactly what differs."""
    rows: list[tuple[str, str, str, str]] = []
    base = env.image.build.base if env.image.build is not None else "(prebuilt)"
    rows.append(("base", "image", base, f"debian {SUITE} debootstrap --variant=minbase"))
    debian: dict[str, str] = record.get("debian", {})  # type: ignore[assignment]
    for name in production_apt(env):
        if name not in debian:
            rows.append(("apt", name, "installed", "absent"))
    for name in apt_packages(env):
        if name not in production_apt(env):
            rows.append(("apt", name, "from the base, if at all", debian.get(name, "absent")))
    lock = env.image.build.lock if env.image.build is not None else None
    produced = pins(lock) if lock else {}
    variant = {normalize(k): v for k, v in record.get("python", {}).items()}  # type: ignore[union-attr]
    for name in sorted(set(produced) | set(variant)):
        have, want = variant.get(name), produced.get(name)
        if have != want and name not in ("pip",):
            rows.append(("python", name, want or "absent", have or "absent"))
    return rows


def differences_markdown(env: Environment, record: dict[str, Any]) -> str:
    """The differences as a Markdown table (docs/images.md holds its output for local-k8s)."""
    lines = ["| kind | package | production image | CPU variant |", "| --- | --- | --- | --- |"]
    lines += [f"| {k} | `{n}` | {a} | {b} |" for k, n, a, b in differences(env, record)]
    return "\n".join(lines) + "\n"


def cached_record(env: Environment, project: Path) -> dict[str, Any] | None:
    """The record of the stack's CPU image when the archive for its current recipe exists."""
    plan = recipe(env, project)
    if archive_path(plan).is_file() and record_path(plan).is_file():
        return json.loads(record_path(plan).read_text())
    return None


def main(argv: list[str] | None = None) -> int:
    """`python -m grpo_infra.image.build STACK`: the same as `grpo-infra image build STACK`."""
    from ..spec import SpecError, load_stack

    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        print("usage: python -m grpo_infra.image.build STACK", file=sys.stderr)
        return 2
    try:
        env = load_stack(args[0]).environment
        build(env, Path.cwd(), progress=lambda line: print(line, flush=True))
    except SpecError as exc:
        print(exc.render(), file=sys.stderr)
        return 2
    except BuildError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
