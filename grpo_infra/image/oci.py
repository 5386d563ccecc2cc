"""OCI image archives written from a directory tree, with no registry and no container daemon.

The local cluster's nodes load images with `ctr -n k8s.io images import FILE` (containerd), which
reads an OCI image layout packed as a tar: `oci-layout`, `index.json` and content-addressed
`blobs/sha256/*` (OCI image-spec v1.1 `image-layout.md`). The image's name comes from the index
entry's `io.containerd.image.name` annotation (containerd `images/archive/importer.go`), and other
tools (umoci, skopeo) read `org.opencontainers.image.ref.name` (image-spec `annotations.md`), so both
carry the full reference the pods name. One gzip layer holds the whole root file system.

Standard library only: the image's contents are decided by the callers (the job's CPU image in
`grpo_infra.image.build`, the operators' images in `grpo_infra.kube.operator_images`).
"""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import os
import shutil
import subprocess
import tarfile
import tempfile
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path

from ..archives import UnsafeArchive, extract_all

MEDIA_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
MEDIA_CONFIG = "application/vnd.oci.image.config.v1+json"
MEDIA_LAYER = "application/vnd.oci.image.layer.v1.tar+gzip"
MEDIA_INDEX = "application/vnd.oci.image.index.v1+json"
REF_NAME = "org.opencontainers.image.ref.name"
CONTAINERD_NAME = "io.containerd.image.name"
# Directories whose contents belong to the runtime, not the image: the container runtime mounts
# /proc, /sys and /dev, and /run and /tmp start empty.
RUNTIME_DIRS = ("dev", "proc", "sys", "run", "tmp")


class OCIError(Exception):
    """An archive could not be unpacked or run; the message is the one line to show."""


def cache_dir() -> Path:
    """`${GRPO_INFRA_CACHE:-~/.cache/grpo-infra}/images`: every image archive the local cluster loads."""
    base = os.environ.get("GRPO_INFRA_CACHE") or str(Path.home() / ".cache" / "grpo-infra")
    return Path(base) / "images"


@dataclass(frozen=True)
class ImageConfig:
    """What a container of the image runs with (image-spec `config.md`, field `config`)."""

    entrypoint: list[str] = field(default_factory=list)
    cmd: list[str] = field(default_factory=list)
    env: dict[str, str] = field(default_factory=dict)
    user: str = ""
    working_dir: str = "/"
    labels: dict[str, str] = field(default_factory=dict)

    def as_json(self) -> dict[str, object]:
        body: dict[str, object] = {"Env": [f"{k}={v}" for k, v in self.env.items()], "WorkingDir": self.working_dir}
        if self.entrypoint:
            body["Entrypoint"] = list(self.entrypoint)
        if self.cmd:
            body["Cmd"] = list(self.cmd)
        if self.user:
            body["User"] = self.user
        if self.labels:
            body["Labels"] = dict(self.labels)
        return body


class _Digesting(io.RawIOBase):
    """A write-only stream that hashes and counts what passes through it to `sink`."""

    def __init__(self, sink: io.BufferedIOBase | io.RawIOBase | gzip.GzipFile) -> None:
        self.sink, self.sha, self.size = sink, hashlib.sha256(), 0

    def writable(self) -> bool:
        return True

    def write(self, data: bytes) -> int:  # type: ignore[override]
        self.sha.update(data)
        self.size += len(data)
        self.sink.write(data)
        return len(data)


def _members(root: Path) -> Iterable[Path]:
    """Every path under `root` in a stable order, runtime directories kept empty."""
    for dirpath, dirnames, filenames in os.walk(root):
        here = Path(dirpath)
        dirnames[:] = sorted(dirnames)
        rel = here.relative_to(root)
        if rel.parts and rel.parts[0] in RUNTIME_DIRS and len(rel.parts) == 1:
            dirnames[:] = []
            filenames = []
        yield here
        for name in sorted(filenames):
            yield here / name
        # os.walk lists symlinks to directories among dirnames without descending: emit them here.
        for name in list(dirnames):
            if (here / name).is_symlink():
                dirnames.remove(name)
                yield here / name


@dataclass(frozen=True)
class Layer:
    """A gzip tar layer on disk: its blob digest, its uncompressed diff_id and the blob's size."""

    blob: Path
    digest: str
    diff_id: str
    size: int

    def as_json(self) -> dict[str, object]:
        return {"blob": str(self.blob), "digest": self.digest, "diff_id": self.diff_id, "size": self.size}

    @classmethod
    def from_json(cls, data: dict[str, object]) -> Layer:
        return cls(Path(str(data["blob"])), str(data["digest"]), str(data["diff_id"]), int(str(data["size"])))


def _with_parents(root: Path, paths: Iterable[Path]) -> list[Path]:
    """`paths` and every directory above them up to `root`, parents first (a layer names each directory)."""
    out: set[Path] = set()
    for path in paths:
        out.add(path)
        out.update(p for p in path.parents if p.is_relative_to(root))
    return sorted(out, key=lambda p: p.relative_to(root).parts)


def write_layer(
    root: Path, out: Path, progress: Callable[[int], None] | None = None, paths: Iterable[Path] | None = None
) -> Layer:
    """`root` (or only `paths` under it) as one gzip tar layer in `out`."""
    members = _members(root) if paths is None else _with_parents(root, paths)
    with out.open("wb") as raw:
        blob = _Digesting(raw)
        with gzip.GzipFile(fileobj=blob, mode="wb", compresslevel=3, mtime=0) as gz:  # type: ignore[arg-type]
            plain = _Digesting(gz)
            with tarfile.open(fileobj=plain, mode="w|", format=tarfile.PAX_FORMAT) as tar:  # type: ignore[arg-type]
                for count, path in enumerate(members, start=1):
                    rel = path.relative_to(root).as_posix()
                    tar.add(path, arcname=rel if rel != "." else "./", recursive=False)
                    if progress is not None and count % 5000 == 0:
                        progress(plain.size)
    return Layer(out, f"sha256:{blob.sha.hexdigest()}", f"sha256:{plain.sha.hexdigest()}", blob.size)


def _blob(data: bytes) -> tuple[str, bytes]:
    return f"sha256:{hashlib.sha256(data).hexdigest()}", data


def _add_bytes(tar: tarfile.TarFile, name: str, data: bytes) -> None:
    info = tarfile.TarInfo(name)
    info.size, info.mode, info.mtime = len(data), 0o644, 0
    tar.addfile(info, io.BytesIO(data))


def pack(layers: list[Layer], ref: str, dest: Path, config: ImageConfig) -> str:
    """The OCI image `ref` made of `layers` (lowest first) into the archive `dest`; returns the manifest digest.

    Written beside `dest` and renamed into place, so a reader never sees half an archive."""
    dest.parent.mkdir(parents=True, exist_ok=True)
    config_json = {
        "architecture": "amd64",
        "os": "linux",
        "config": config.as_json(),
        "rootfs": {"type": "layers", "diff_ids": [layer.diff_id for layer in layers]},
        "history": [{"created_by": "grpo-infra", "comment": ref} for _ in layers],
    }
    config_digest, config_bytes = _blob(json.dumps(config_json, sort_keys=True).encode())
    manifest = {
        "schemaVersion": 2,
        "mediaType": MEDIA_MANIFEST,
        "config": {"mediaType": MEDIA_CONFIG, "digest": config_digest, "size": len(config_bytes)},
        "layers": [{"mediaType": MEDIA_LAYER, "digest": layer.digest, "size": layer.size} for layer in layers],
    }
    manifest_digest, manifest_bytes = _blob(json.dumps(manifest, sort_keys=True).encode())
    index = {
        "schemaVersion": 2,
        "mediaType": MEDIA_INDEX,
        "manifests": [
            {
                "mediaType": MEDIA_MANIFEST,
                "digest": manifest_digest,
                "size": len(manifest_bytes),
                "platform": {"architecture": "amd64", "os": "linux"},
                "annotations": {REF_NAME: ref, CONTAINERD_NAME: ref},
            }
        ],
    }
    with tempfile.TemporaryDirectory(dir=dest.parent, prefix=".pack-") as scratch:
        partial = Path(scratch) / "image.tar"
        with tarfile.open(partial, "w", format=tarfile.PAX_FORMAT) as tar:
            _add_bytes(tar, "oci-layout", json.dumps({"imageLayoutVersion": "1.0.0"}).encode())
            _add_bytes(tar, "index.json", json.dumps(index, sort_keys=True).encode())
            for name, data in ((config_digest, config_bytes), (manifest_digest, manifest_bytes)):
                _add_bytes(tar, f"blobs/sha256/{name.removeprefix('sha256:')}", data)
            for layer in layers:
                info = tar.gettarinfo(str(layer.blob), arcname=f"blobs/sha256/{layer.digest.removeprefix('sha256:')}")
                info.mtime, info.uid, info.gid, info.uname, info.gname = 0, 0, 0, "", ""
                with layer.blob.open("rb") as handle:
                    tar.addfile(info, handle)
        os.replace(partial, dest)
    return manifest_digest


def write_archive(
    root: Path,
    ref: str,
    dest: Path,
    config: ImageConfig,
    *,
    progress: Callable[[str], None] | None = None,
) -> str:
    """Pack the directory `root` as the one-layer OCI image `ref` into the archive `dest`."""
    say = progress or (lambda _line: None)
    dest.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=dest.parent, prefix=".layer-") as scratch:
        say(f"packing {root} as one layer")
        layer = write_layer(root, Path(scratch) / "layer.tar.gz", lambda n: say(f"  {n / 2**20:.0f} MiB packed"))
        digest = pack([layer], ref, dest, config)
    say(f"wrote {dest} ({dest.stat().st_size / 2**20:.0f} MiB)")
    return digest


def archive_reference(archive: Path) -> str | None:
    """The reference an archive's index names (what `ctr images import` tags it as), or None."""
    with tarfile.open(archive) as tar:
        member = tar.extractfile("index.json")
        if member is None:
            return None
        index = json.load(member)
    for entry in index.get("manifests", []):
        name = entry.get("annotations", {}).get(CONTAINERD_NAME)
        if name:
            return str(name)
    return None


def run_in_container(
    archive: Path, ref: str, command: list[str], *, timeout: float = 300, runc: str = "runc"
) -> tuple[int, str]:
    """Run `command` in a container of the archive the way a node's runtime would: the archive unpacked
    by umoci into an OCI runtime bundle, started by runc (or the node's `runc`, a wrapper around it).
    Returns (exit code, combined output)."""
    for tool in ("umoci", "runc"):
        if shutil.which(tool) is None:
            raise OCIError(f"{tool} not found: run scripts/install-system-deps.sh as root")
    with tempfile.TemporaryDirectory(prefix="grpo-image-verify-") as scratch:
        layout, bundle = Path(scratch) / "layout", Path(scratch) / "bundle"
        with tarfile.open(archive) as tar:
            try:
                extract_all(tar, layout)
            except UnsafeArchive as err:
                raise OCIError(f"{archive} is not a safe image layout: {err}") from err
        unpack = subprocess.run(
            ["umoci", "unpack", "--image", f"{layout}:{ref}", str(bundle)], capture_output=True, text=True
        )
        if unpack.returncode != 0:
            raise OCIError(f"umoci unpack of {archive} failed: {unpack.stderr.strip().splitlines()[-1:]}")
        spec_file = bundle / "config.json"
        spec = json.loads(spec_file.read_text())
        spec["process"]["args"] = command
        spec["process"]["terminal"] = False
        spec_file.write_text(json.dumps(spec))
        name = f"grpo-verify-{os.getpid()}-{int(time.time() * 1000) % 100000}"
        try:
            proc = subprocess.run(
                [runc, "run", "--bundle", str(bundle), name],
                stdin=subprocess.DEVNULL,
                capture_output=True,
                text=True,
                timeout=timeout,
            )
        finally:
            subprocess.run(["runc", "delete", "--force", name], capture_output=True)
        return proc.returncode, proc.stdout + proc.stderr
