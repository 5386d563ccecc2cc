"""The pinned CRDs: from the project's bundled charts, found next to the project, or fetched from the
upstream tags, and checked by sha256.

KubeRay's CRDs are read from the bundled kuberay-operator chart (grpo_infra/k8s/charts/, its
`crds/` folder is the tag's `ray-operator/config/crd/bases/`), so a clone needs nothing else for them.

`../shared/crds/` (beside the project directory, or the folder named by `GRPO_INFRA_CRDS`) holds
byte-identical copies of the upstream files. In a clone without it, and only when
`GRPO_INFRA_FETCH_CRDS=1` allows network access, the same files are downloaded from the release tags'
raw URLs into a cache and accepted only if their sha256 matches `crds.sha256`, which lives in the
project. Nothing is fetched unless asked.
"""

from __future__ import annotations

import functools
import hashlib
import os
import tarfile
import urllib.request
from pathlib import Path
from typing import Any

import yaml

PROJECT = Path(__file__).resolve().parents[2]
SHARED = Path(os.environ.get("GRPO_INFRA_CRDS") or PROJECT.parent / "shared" / "crds")
FETCH = os.environ.get("GRPO_INFRA_FETCH_CRDS") == "1"
MANIFEST = Path(__file__).with_name("crds.sha256")
CACHE = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "grpo-infra" / "crds"

# folder → raw URL prefix of the upstream tag's CRD directory.
UPSTREAM = {
    "kuberay-v1.6.2": "https://raw.githubusercontent.com/ray-project/kuberay/v1.6.2/ray-operator/config/crd/bases/",
    "kueue-v0.19.2": "https://raw.githubusercontent.com/kubernetes-sigs/kueue/v0.19.2/config/components/crd/bases/",
}


# folder → (bundled chart, the folder of CRDs inside it).
BUNDLED = {"kuberay-v1.6.2": ("kuberay-operator-1.6.2.tgz", "kuberay-operator/crds/")}
CHARTS = PROJECT / "grpo_infra" / "k8s" / "charts"


class CrdUnavailable(RuntimeError):
    """A pinned CRD is neither beside the project nor downloadable with the pinned checksum."""


def pinned() -> dict[str, str]:
    """`folder/file` → sha256, from the manifest."""
    out = {}
    for line in MANIFEST.read_text().splitlines():
        if line.strip() and not line.startswith("#"):
            digest, rel = line.split()
            out[rel] = digest
    return out


def crd_path(rel: str) -> Path:
    """A pinned CRD file on disk: the shared copy, else a verified download in the cache."""
    digest = pinned()[rel]
    bundled = _from_chart(rel, digest)
    if bundled is not None:
        return bundled
    shared = SHARED / rel
    if shared.is_file():
        return shared
    cached = CACHE / rel
    if cached.is_file() and _sha256(cached.read_bytes()) == digest:
        return cached
    folder, name = rel.split("/")
    url = UPSTREAM[folder] + name
    if not FETCH:
        raise CrdUnavailable(
            f"{rel}: not in {SHARED}; point GRPO_INFRA_CRDS at a folder holding the pinned CRDs, or set "
            f"GRPO_INFRA_FETCH_CRDS=1 to download them from {UPSTREAM[folder]} (checked against {MANIFEST.name})"
        )
    try:
        with urllib.request.urlopen(url, timeout=60) as response:
            body = response.read()
    except OSError as exc:
        raise CrdUnavailable(f"{rel}: not in {SHARED} and cannot download {url}: {exc}") from None
    if _sha256(body) != digest:
        raise CrdUnavailable(f"{rel}: {url} has sha256 {_sha256(body)}, expected {digest}")
    cached.parent.mkdir(parents=True, exist_ok=True)
    cached.write_bytes(body)
    return cached


def _from_chart(rel: str, digest: str) -> Path | None:
    """The CRD from a bundled chart, copied into the cache once and held to its pinned sha256."""
    folder, name = rel.split("/")
    if folder not in BUNDLED:
        return None
    chart, inside = BUNDLED[folder]
    cached = CACHE / rel
    if not (cached.is_file() and _sha256(cached.read_bytes()) == digest):
        with tarfile.open(CHARTS / chart) as tar:
            member = tar.extractfile(inside + name)
            body = member.read() if member is not None else b""
        if _sha256(body) != digest:
            raise CrdUnavailable(f"{rel}: {CHARTS / chart} holds sha256 {_sha256(body)}, expected {digest}")
        cached.parent.mkdir(parents=True, exist_ok=True)
        cached.write_bytes(body)
    return cached


@functools.cache
def crd_schemas() -> dict[tuple[str, str, str], dict[str, Any]]:
    """(group, version, kind) → openAPIV3Schema of every served version of every pinned CRD."""
    out = {}
    for rel in pinned():
        document = yaml.load(crd_path(rel).read_bytes(), Loader=yaml.CSafeLoader)
        spec = document["spec"]
        for version in spec["versions"]:
            if version.get("served", True):
                out[(spec["group"], version["name"], spec["names"]["kind"])] = version["schema"]["openAPIV3Schema"]
    return out


def schema_for(api_version: str, kind: str) -> dict[str, Any] | None:
    group, _, version = api_version.rpartition("/")
    return crd_schemas().get((group, version, kind))


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()
