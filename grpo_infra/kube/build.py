"""Build the local Kubernetes' programs from Go modules, pinned, into a cache keyed by version.

Nothing here is vendored: each group of binaries gets a small wrapper module of ours (a go.mod that
requires the upstream module plus the `replace` lines `go install pkg@version` refuses to honour),
generated in the cache and built with the machine's Go toolchain and module proxy. A built version is
reused; a missing toolchain or a module the proxy does not serve is one line, not a trace.

Standard library only, so `scripts/build-kube.sh` runs before any virtualenv exists.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from grpo_infra.kube.versions import (
    ETCD,
    KUBE_ROUTER,
    KUBERAY,
    KUBERNETES,
    KUEUE,
    KWOK,
    PULUMI,
    PULUMI_KUBERNETES,
    PULUMI_KUBERNETES_MODULE,
    cache_root,
)

WRAPPER_PREFIX = "grpo-infra.local/kube"
LANGUAGE_HOST = "github.com/pulumi/pulumi/sdk/python/cmd/pulumi-language-python/v3"


@dataclass(frozen=True)
class Binary:
    """One program: the component name it is cached under, its version, and the Go package."""

    component: str
    version: str
    package: str
    ldflags: tuple[str, ...] = ()
    # Files of the module the program needs at run time (CRDs, webhook manifests, KWOK's stages),
    # copied next to the binary: (module, path inside it).
    data: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True)
class Group:
    """One wrapper module: binaries built from it share one set of dependency versions, so
    packages common to them compile once (the build cache is keyed by content, not by binary)."""

    name: str
    requires: dict[str, str]
    # Upstream modules whose go.mod `replace` lines must be carried into the wrapper, and how a
    # relative replace (`M => ../x`, a sibling directory in the upstream repository) is pinned.
    replaces_from: tuple[str, ...] = ()
    relative_version: dict[str, str] = field(default_factory=dict)
    extra_replaces: dict[str, str] = field(default_factory=dict)
    binaries: tuple[Binary, ...] = ()
    # Files written into the wrapper (a main package of ours), keyed by relative path.
    sources: dict[str, str] = field(default_factory=dict)
    # Not needed for the local cluster to work: a failure is reported and the run still succeeds.
    optional: bool = False


def _k8s_version_ldflags(version: str) -> tuple[str, ...]:
    """Tools parse `--version` (kubectl's skew check, Pulumi's cluster version), so stamp it."""
    major, minor, _ = version.lstrip("v").split(".")
    pkg = "k8s.io/component-base/version"
    return (
        f"-X {pkg}.gitVersion={version}",
        f"-X {pkg}.gitMajor={major}",
        f"-X {pkg}.gitMinor={minor}",
        f"-X {pkg}.gitTreeState=clean",
    )


def _staging_version(kubernetes: str) -> str:
    """k8s.io/kubernetes vX.Y.Z publishes its staging modules (k8s.io/api, ...) as v0.Y.Z."""
    _, minor, patch = kubernetes.lstrip("v").split(".")
    return f"v0.{minor}.{patch}"


PROVIDER_MAIN = """// Serves the pulumi-kubernetes provider with the schema it ships, which upstream embeds from
// generated, git-ignored files; here they are copied from the module at build time.
package main

import (
	_ "embed"

	"github.com/pulumi/pulumi-kubernetes/provider/v4/pkg/provider"
	"github.com/pulumi/pulumi-kubernetes/provider/v4/pkg/version"
)

//go:embed schema-embed.json
var pulumiSchema []byte

//go:embed terraform-mapping-embed.json
var terraformMapping []byte

func main() {
	provider.Serve("kubernetes", version.Version, pulumiSchema, terraformMapping)
}
"""


def groups() -> tuple[Group, ...]:
    """The pinned programs, grouped by wrapper module (see docs/local-kubernetes.md for why
    these versions)."""
    k8s = "k8s.io/kubernetes"
    kueue = "sigs.k8s.io/kueue"
    ray = "github.com/ray-project/kuberay/ray-operator"
    pulumi_pkg = "github.com/pulumi/pulumi/pkg/v3"
    pulumi_sdk = "github.com/pulumi/pulumi/sdk/v3"
    provider = "github.com/pulumi/pulumi-kubernetes/provider/v4"
    k8s_flags = _k8s_version_ldflags(KUBERNETES)
    return (
        Group(
            name="etcd",
            requires={"go.etcd.io/etcd/server/v3": ETCD},
            replaces_from=("go.etcd.io/etcd/server/v3",),
            relative_version={"*": ETCD},
            binaries=(Binary("etcd", ETCD, "go.etcd.io/etcd/server/v3"),),
        ),
        Group(
            name="kubernetes",
            # Kueue v0.19.2 and KWOK v0.8.0 are built against k8s.io/* v0.36, so the control plane is
            # the v1.36 line and all of them come from one module graph: shared packages compile once.
            requires={k8s: KUBERNETES, kueue: KUEUE, "sigs.k8s.io/kwok": KWOK},
            replaces_from=(k8s,),
            relative_version={"*": _staging_version(KUBERNETES)},
            binaries=(
                Binary("kube-apiserver", KUBERNETES, f"{k8s}/cmd/kube-apiserver", k8s_flags),
                Binary("kube-controller-manager", KUBERNETES, f"{k8s}/cmd/kube-controller-manager", k8s_flags),
                Binary("kube-scheduler", KUBERNETES, f"{k8s}/cmd/kube-scheduler", k8s_flags),
                Binary("kubectl", KUBERNETES, f"{k8s}/cmd/kubectl", k8s_flags),
                # The real nodes' kubelet: the control plane's own version, from the same graph.
                Binary("kubelet", KUBERNETES, f"{k8s}/cmd/kubelet", k8s_flags),
                Binary(
                    "kueue",
                    KUEUE,
                    f"{kueue}/cmd/kueue",
                    data=(
                        (kueue, "config/components/crd/bases"),
                        (kueue, "config/components/crd/kustomization.yaml"),
                        (kueue, "config/components/webhook/manifests.yaml"),
                    ),
                ),
                Binary(
                    "kwok",
                    KWOK,
                    "sigs.k8s.io/kwok/cmd/kwok",
                    data=tuple(
                        ("sigs.k8s.io/kwok", f"kustomize/stage/{stage}")
                        for stage in ("node/fast", "node/heartbeat", "pod/fast")
                    ),
                ),
            ),
        ),
        Group(
            # The real nodes' NetworkPolicy agent: upstream's own program, unchanged, in a module graph of its own.
            name="kube-router",
            requires={"github.com/cloudnativelabs/kube-router/v2": KUBE_ROUTER},
            binaries=(Binary("kube-router", KUBE_ROUTER, "github.com/cloudnativelabs/kube-router/v2/cmd/kube-router"),),
        ),
        Group(
            name="kuberay",
            requires={ray: KUBERAY},
            binaries=(Binary("ray-operator", KUBERAY, ray, data=((ray, "config/crd/bases"),)),),
        ),
        Group(
            name="pulumi",
            # The released pkg/go.mod names an older sdk (upstream hides it behind a replace).
            requires={pulumi_pkg: PULUMI, pulumi_sdk: PULUMI},
            replaces_from=(pulumi_pkg,),
            relative_version={"*": PULUMI},
            binaries=(
                Binary(
                    "pulumi",
                    PULUMI,
                    f"{pulumi_pkg}/cmd/pulumi",
                    (f"-X {pulumi_sdk}/go/common/version.Version={PULUMI}",),
                ),
            ),
        ),
        Group(
            # The Python language host is its own module with no tags; the Automation API's inline
            # programs (what grpo_infra.kube.pulumi drives) do not need it.
            name="pulumi-language-python",
            requires={LANGUAGE_HOST: PULUMI},
            binaries=(Binary("pulumi-language-python", PULUMI, LANGUAGE_HOST),),
            optional=True,
        ),
        Group(
            name="pulumi-kubernetes",
            requires={provider: PULUMI_KUBERNETES_MODULE},
            replaces_from=(provider,),
            # provider/go.mod replaces its sibling sdk/v4 at v4.24.0, which is not served; the
            # provider's program does not import it, only the module graph names it.
            relative_version={"*": "v4.29.0"},
            # ...but sdk/v4 v4.29.0 asks for a newer Pulumi SDK than the provider compiles with
            # (pkg v3.215.0's plugin.NewContextWithRoot): hold both at the provider's own versions.
            extra_replaces={
                pulumi_pkg: f"{pulumi_pkg} v3.215.0",
                pulumi_sdk: f"{pulumi_sdk} v3.215.0",
            },
            binaries=(
                Binary(
                    "pulumi-resource-kubernetes",
                    PULUMI_KUBERNETES,
                    f"{WRAPPER_PREFIX}/pulumi-kubernetes",
                    (f"-X {provider}/pkg/version.Version={PULUMI_KUBERNETES.lstrip('v')}",),
                ),
            ),
            sources={"main.go": PROVIDER_MAIN},
        ),
    )


class BuildError(Exception):
    """A build step failed; the message is the one line to show."""


def _go(args: list[str], cwd: Path, log: Path) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ)
    env.setdefault("GOFLAGS", "-mod=mod")
    if "-mod=mod" not in env["GOFLAGS"]:
        env["GOFLAGS"] += " -mod=mod"
    with log.open("a") as out:
        out.write(f"$ go {' '.join(args)}\n")
        out.flush()
        proc = subprocess.run(["go", *args], cwd=cwd, env=env, text=True, capture_output=True)
        out.write(proc.stdout + proc.stderr)
    return proc


def _first_error(text: str) -> str:
    """The line of `go`'s output that says what went wrong (not its download progress)."""
    lines = [
        ln.strip()
        for ln in text.splitlines()
        if ln.strip() and not ln.startswith(("go: downloading", "go: errors parsing", "# "))
    ]
    for ln in lines:
        if "not available" in ln or "Forbidden" in ln or "404" in ln or "410" in ln:
            return ln
    return lines[0] if lines else "(no output)"


def _module_dir(module: str, version: str, cwd: Path, log: Path) -> Path:
    proc = _go(["mod", "download", "-json", f"{module}@{version}"], cwd, log)
    try:
        info = json.loads(proc.stdout)
    except json.JSONDecodeError:
        info = {}
    if proc.returncode != 0 or "Dir" not in info:
        reason = " ".join((info.get("Error") or _first_error(proc.stderr)).split())
        raise BuildError(f"{module}@{version} is not served by the Go module proxy: {reason}")
    return Path(info["Dir"])


_REPLACE_LINE = re.compile(r"^\s*(?:replace\s+)?(\S+)(?:\s+(\S+))?\s+=>\s+(\S+)(?:\s+(\S+))?\s*$")


def upstream_replaces(gomod: str) -> list[tuple[str, str, str | None]]:
    """The replace directives of a go.mod: (module, target path, target version or None)."""
    out: list[tuple[str, str, str | None]] = []
    in_block = False
    for raw in gomod.splitlines():
        line = raw.split("//", 1)[0].rstrip()
        if line.startswith("replace ("):
            in_block = True
            continue
        if in_block and line.strip() == ")":
            in_block = False
            continue
        if in_block or line.startswith("replace "):
            m = _REPLACE_LINE.match(line)
            if m:
                out.append((m.group(1), m.group(3), m.group(4)))
    return out


def wrapper_gomod(group: Group, upstream: dict[str, str]) -> str:
    """The wrapper's go.mod: our module, the pinned requires, and upstream's replaces with each
    relative one (a directory of the upstream repository) turned into a pinned module version."""
    go_version = subprocess.run(["go", "env", "GOVERSION"], capture_output=True, text=True).stdout.strip()
    lines = [f"module {WRAPPER_PREFIX}/{group.name}", "", f"go {go_version.removeprefix('go')}", ""]
    lines += ["require ("] + [f"\t{m} {v}" for m, v in group.requires.items()] + [")", ""]
    replaces: dict[str, str] = {}
    for gomod in upstream.values():
        required = set(re.findall(r"^\s*(?:require\s+)?(\S+)\s+v\S+", gomod, re.MULTILINE))
        for module, target, version in upstream_replaces(gomod):
            if target.startswith(".") and module not in required:
                continue  # a sibling the build graph never reaches (e.g. a tests module)
            if target.startswith("."):
                pinned = group.relative_version.get(module, group.relative_version.get("*"))
                replaces[module] = f"{module} {pinned}"
            else:
                replaces[module] = f"{target} {version}" if version else target
    replaces.update(group.extra_replaces)
    for module in group.requires:
        replaces.pop(module, None)
    if replaces:
        lines += ["replace ("] + [f"\t{m} => {t}" for m, t in sorted(replaces.items())] + [")", ""]
    return "\n".join(lines)


def binary_dir(binary: Binary) -> Path:
    return cache_root() / f"{binary.component}-{binary.version}"


def binary_path(component: str, version: str, name: str | None = None) -> Path:
    return cache_root() / f"{component}-{version}" / "bin" / (name or component)


def is_built(binary: Binary) -> bool:
    return (binary_dir(binary) / "built.json").is_file() and binary_path(binary.component, binary.version).is_file()


def say(msg: str) -> None:
    print(f"[build-kube] {time.strftime('%H:%M:%S')} {msg}", flush=True)


def prepare(group: Group, log: Path) -> Path:
    """Write the wrapper module for a group and return its directory."""
    src = cache_root() / "src" / group.name
    src.mkdir(parents=True, exist_ok=True)
    upstream: dict[str, str] = {}
    for module in group.replaces_from:
        moddir = _module_dir(module, group.requires[module], src, log)
        upstream[module] = (moddir / "go.mod").read_text()
    gomod = wrapper_gomod(group, upstream)
    if (
        (src / "go.mod").exists()
        and (src / "go.mod.generated").exists()
        and (src / "go.mod.generated").read_text() == gomod
    ):
        return src  # keep the resolved go.mod/go.sum from the last run
    (src / "go.mod").write_text(gomod)
    (src / "go.mod.generated").write_text(gomod)
    for rel, text in group.sources.items():
        (src / rel).write_text(text)
    if group.name == "pulumi-kubernetes":
        moddir = _module_dir("github.com/pulumi/pulumi-kubernetes/provider/v4", PULUMI_KUBERNETES_MODULE, src, log)
        cmd = moddir / "cmd" / "pulumi-resource-kubernetes"
        schema = json.loads((cmd / "schema.json").read_text())
        schema["version"] = PULUMI_KUBERNETES.lstrip("v")
        (src / "schema-embed.json").write_text(json.dumps(schema))
        shutil.copyfile(cmd / "terraform-mapping.json", src / "terraform-mapping-embed.json")
    return src


def build_binary(group: Group, binary: Binary, src: Path, log: Path) -> None:
    out = binary_path(binary.component, binary.version)
    out.parent.mkdir(parents=True, exist_ok=True)
    ldflags = " ".join(("-s", "-w", *binary.ldflags))
    started = time.monotonic()
    proc = _go(["build", "-trimpath", "-ldflags", ldflags, "-o", str(out), binary.package], src, log)
    if proc.returncode != 0:
        raise BuildError(
            f"{binary.component} {binary.version}: go build failed: {_first_error(proc.stderr)} (log: {log})"
        )
    seconds = round(time.monotonic() - started)
    (binary_dir(binary) / "built.json").write_text(
        json.dumps(
            {"component": binary.component, "version": binary.version, "package": binary.package, "seconds": seconds}
        )
    )
    say(f"{binary.component} {binary.version}: built in {seconds}s ({out.stat().st_size // 2**20} MiB)")


def copy_data(binary: Binary, log: Path) -> None:
    """Copy the module files a program reads at run time into `<component>-<version>/data/`."""
    for module, rel in binary.data:
        target = binary_dir(binary) / "data" / rel
        if target.exists():
            continue
        source = _module_dir(module, binary.version, binary_dir(binary), log) / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        if source.is_dir():
            shutil.copytree(source, target, ignore=shutil.ignore_patterns("testdata", "*.go"))
        else:
            shutil.copyfile(source, target)
        for path in [target, *target.rglob("*")]:
            path.chmod(0o755 if path.is_dir() else 0o644)


def build(selected: set[str] | None, log_dir: Path) -> int:
    if shutil.which("go") is None:
        say("Go toolchain not found on PATH: install Go >= 1.25 (https://go.dev/doc/install) and re-run")
        return 2
    failures: list[str] = []
    for group in groups():
        wanted = [b for b in group.binaries if selected is None or b.component in selected]
        todo = [b for b in wanted if not is_built(b)]
        log = log_dir / f"{group.name}.log"
        log.parent.mkdir(parents=True, exist_ok=True)
        for b in wanted:
            if b not in todo:
                say(f"{b.component} {b.version}: cached at {binary_path(b.component, b.version)}")
        try:
            for b in wanted:
                if b not in todo:
                    copy_data(b, log)
            if not todo:
                continue
            say(f"{group.name}: resolving modules (log: {log})")
            for module, version in group.requires.items():
                _module_dir(module, version, log.parent, log)
            src = prepare(group, log)
            for b in todo:
                say(f"{b.component} {b.version}: building {b.package}")
                build_binary(group, b, src, log)
                copy_data(b, log)
        except BuildError as exc:
            if group.optional:
                say(f"skipped (optional) {exc}")
                continue
            say(f"FAILED {exc}")
            failures.append(str(exc))
    if failures:
        say(f"{len(failures)} failed; the rest is in {cache_root()}")
        return 1
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("components", nargs="*", help="build only these (default: all)")
    parser.add_argument("--log-dir", type=Path, default=None)
    args = parser.parse_args(argv)
    log_dir = args.log_dir or cache_root() / "logs"
    return build(set(args.components) or None, log_dir)


if __name__ == "__main__":
    sys.exit(main())
