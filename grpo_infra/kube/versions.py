"""The versions the local Kubernetes runs, and where their binaries are cached.

These are the newest versions whose sources the Go module proxy serves to our machines, not the
production pins (Kueue 0.19.2, KubeRay 1.7.0): docs/local-kubernetes.md says which is which.
Standard library only (the build script runs before any virtualenv exists).
"""

from __future__ import annotations

import os
from pathlib import Path

KUBERNETES = "v1.36.3"
ETCD = "v3.6.16"
KUEUE = "v0.19.2"
KUBERAY = "v1.6.2"
KWOK = "v0.8.0"
# The NetworkPolicy agent of the real nodes (kube/netpolicy.py says why this one).
KUBE_ROUTER = "v2.1.0"
PULUMI = "v3.274.1"
# The provider module has no tag the proxy serves; this pseudo-version is its v4.25.0 commit.
PULUMI_KUBERNETES = "v4.25.0"
PULUMI_KUBERNETES_MODULE = "v4.0.0-20260115033456-f47bc2d6f199"


def cache_root() -> Path:
    """`$GRPO_INFRA_CACHE/kube` (default ~/.cache/grpo-infra/kube): one directory per
    component and version, so a new pin builds beside the old one and nothing is rebuilt."""
    base = os.environ.get("GRPO_INFRA_CACHE") or str(Path.home() / ".cache" / "grpo-infra")
    return Path(base) / "kube"
