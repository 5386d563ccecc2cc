"""The operators' container images, made here from the binaries built from Go modules.

The charts run each operator as `/manager` under the image reference their values name
(grpo_infra/k8s/operators.py), as a non-root user (`runAsNonRoot: true` in both charts' values:
kueue 0.19.2 `values.yaml` `podSecurityContext`, kuberay-operator 1.6.2 `values.yaml`
`securityContext`). Upstream builds the same thing on distroless bases with `USER 65532:65532`
(ray-project/kuberay v1.6.2 `ray-operator/Dockerfile`: `distroless/base-debian12:nonroot`, the
binary at `/manager`). Our binaries are linked against this machine's glibc (Go with cgo), so each
image holds the binary at `/manager`, the shared libraries `ldd` names (the C library and its
loader, as distroless/base carries them), a passwd/group naming user 65532, and an empty `/tmp`:
no shell, no package manager, nothing pulled. Each archive is cached under a hash of its bytes.
"""

from __future__ import annotations

import hashlib
import re
import shutil
import subprocess
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from ..image.oci import ImageConfig, OCIError, cache_dir, write_archive
from ..k8s.operators import kuberay_image, kueue_image
from .versions import KUBERAY, KUEUE, cache_root

RECIPE = "operator-image-1"
NONROOT = "65532"
ENTRYPOINT = "/manager"
Progress = Callable[[str], None]


@dataclass(frozen=True)
class OperatorImage:
    """One operator image: the reference the chart names and the binary built for it."""

    ref: str
    binary: Path

    def files(self) -> list[Path]:
        """The binary and every shared object its loader needs (absolute paths on this machine)."""
        return [self.binary, *shared_libraries(self.binary)]

    def key(self) -> str:
        digest = hashlib.sha256(f"{RECIPE}\0{self.ref}\0".encode())
        for path in self.files():
            digest.update(str(path).encode() + b"\0" + path.read_bytes())
        return digest.hexdigest()[:20]

    def archive(self) -> Path:
        name = "".join(c if c.isalnum() or c in "-." else "_" for c in self.ref)
        return cache_dir() / f"{name}-{self.key()}.oci.tar"


def operator_images() -> list[OperatorImage]:
    """Kueue and KubeRay's operator, at the versions the local cluster builds (the production pins)."""
    root = cache_root()
    return [
        OperatorImage(kueue_image(), root / f"kueue-{KUEUE}" / "bin" / "kueue"),
        OperatorImage(kuberay_image(), root / f"ray-operator-{KUBERAY}" / "bin" / "ray-operator"),
    ]


_LDD_LINE = re.compile(r"(?:=>\s*)?(/\S+)\s+\(0x")


def shared_libraries(binary: Path) -> list[Path]:
    """What `ldd` resolves for `binary` (libc, its loader, ...); empty for a static binary."""
    proc = subprocess.run(["ldd", str(binary)], capture_output=True, text=True)
    if proc.returncode != 0:
        return []  # "not a dynamic executable"
    return sorted({Path(m.group(1)) for m in map(_LDD_LINE.search, proc.stdout.splitlines()) if m})


def root_tree(image: OperatorImage, root: Path) -> None:
    """The image's whole file system under `root`."""
    (root / "tmp").mkdir(parents=True)
    (root / "tmp").chmod(0o1777)
    (root / "etc").mkdir()
    (root / "etc/passwd").write_text(
        f"root:x:0:0:root:/root:/sbin/nologin\nnonroot:x:{NONROOT}:{NONROOT}::/tmp:/sbin/nologin\n"
    )
    (root / "etc/group").write_text(f"root:x:0:\nnonroot:x:{NONROOT}:\n")
    (root / "etc/nsswitch.conf").write_text("hosts: files dns\n")
    shutil.copy(image.binary, root / ENTRYPOINT.lstrip("/"))
    (root / ENTRYPOINT.lstrip("/")).chmod(0o755)
    for library in shared_libraries(image.binary):
        target = root / str(library).lstrip("/")
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(library.resolve(), target)
        target.chmod(0o755)


def ensure(image: OperatorImage, progress: Progress | None = None) -> Path:
    """The image's archive, built when its binary or libraries changed; a missing binary is one line."""
    say = progress or (lambda _line: None)
    if not image.binary.is_file():
        raise OCIError(f"{image.binary} not built: run scripts/build-kube.sh (needed for {image.ref})")
    archive = image.archive()
    if archive.is_file():
        say(f"cached: {archive} ({image.ref})")
        return archive
    with tempfile.TemporaryDirectory(prefix="grpo-operator-image-") as scratch:
        root = Path(scratch) / "rootfs"
        root_tree(image, root)
        config = ImageConfig(
            entrypoint=[ENTRYPOINT],
            user=f"{NONROOT}:{NONROOT}",
            env={"PATH": "/"},
            labels={"io.grpo-infra.built-from": str(image.binary)},
        )
        write_archive(root, image.ref, archive, config, progress=say)
    return archive


def ensure_all(progress: Progress | None = None) -> list[Path]:
    """Every operator image archive the local cluster's nodes load (built once, then cached)."""
    return [ensure(image, progress) for image in operator_images()]
