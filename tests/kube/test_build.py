"""The build script's wrapper modules: upstream replaces carried over, relative ones pinned."""

from __future__ import annotations

import subprocess
import sys

from grpo_infra.kube import build

UPSTREAM = """module k8s.io/kubernetes

go 1.25.0

require (
	k8s.io/api v0.0.0
	github.com/foo/bar v1.2.3
)

replace github.com/foo/bar => github.com/fork/bar v1.2.4 // a fork

replace (
	k8s.io/api => ./staging/src/k8s.io/api
	k8s.io/sample-unused => ./staging/src/k8s.io/sample-unused
)
"""


def test_relative_replaces_are_pinned_and_unreached_siblings_dropped() -> None:
    group = build.Group(
        name="demo",
        requires={"k8s.io/kubernetes": "v1.35.4"},
        relative_version={"*": "v0.35.4"},
        extra_replaces={"github.com/x/ray": "github.com/x/ray v1.5.0"},
    )
    gomod = build.wrapper_gomod(group, {"k8s.io/kubernetes": UPSTREAM})
    assert "module grpo-infra.local/kube/demo" in gomod
    assert "\tk8s.io/kubernetes v1.35.4" in gomod
    assert "\tk8s.io/api => k8s.io/api v0.35.4" in gomod
    assert "\tgithub.com/foo/bar => github.com/fork/bar v1.2.4" in gomod
    assert "\tgithub.com/x/ray => github.com/x/ray v1.5.0" in gomod
    # Not required upstream: a replace for it would name a version that does not exist.
    assert "sample-unused" not in gomod


def test_missing_go_is_one_line_and_exit_2(tmp_path) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "grpo_infra.kube.build", "etcd"],
        capture_output=True,
        text=True,
        env={"PATH": str(tmp_path), "GRPO_INFRA_CACHE": str(tmp_path / "cache"), "PYTHONPATH": ":".join(sys.path)},
        check=False,
    )
    assert proc.returncode == 2
    assert proc.stderr == ""
    lines = proc.stdout.strip().splitlines()
    assert len(lines) == 1 and "Go toolchain not found" in lines[0]


def test_every_cached_binary_is_keyed_by_its_version(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("GRPO_INFRA_CACHE", str(tmp_path))
    assert build.binary_path("kueue", "v0.17.0") == tmp_path / "kube" / "kueue-v0.17.0" / "bin" / "kueue"
    names = [b.component for g in build.groups() for b in g.binaries]
    assert len(names) == len(set(names))
    assert {"etcd", "kube-apiserver", "kubectl", "kueue", "ray-operator", "kwok", "pulumi"} <= set(names)


def test_a_compile_error_is_reported_not_the_download_progress() -> None:
    output = (
        "go: downloading k8s.io/autoscaler/cluster-autoscaler/apis v0.0.0-2024\n"
        "# sigs.k8s.io/kueue/pkg/controller/jobs/rayservice\n"
        "rayservice_controller.go:204:29: j.Spec.ManagedBy undefined\n"
    )
    assert build._first_error(output) == "rayservice_controller.go:204:29: j.Spec.ManagedBy undefined"
