"""Images of the local Kubernetes' real nodes themselves, made on this machine (there is no registry
to pull from): the pause image every pod sandbox runs, a small tools image the tests use, and the
loading of image archives into each node's own containerd (which archives: `images.py`).

An archive is an OCI image layout in a tar (image-spec v1.1 `image-layout.md`): `oci-layout`,
`index.json` and content-addressed blobs. Its index names the image with containerd's own
annotation `io.containerd.image.name` (containerd v1.6 `images/archive/importer.go`), so
`ctr images import` gives it exactly the reference the pods use, with `imagePullPolicy: Never`
or `IfNotPresent` finding it without a pull.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import shutil
import subprocess
import tarfile
from pathlib import Path

from .versions import cache_root

# The sandbox image the kubelet asks containerd for (containerd's CRI `sandbox_image`).
PAUSE_REF = "registry.k8s.io/pause:3.10"
TOOLS_REF = "grpo-infra.local/tools:busybox"

# A pod sandbox's only process: hold the pod's namespaces, reap orphans, exit on TERM/INT.
PAUSE_C = r"""
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

static void stop(int sig) { (void)sig; _exit(0); }
static void reap(int sig) { (void)sig; while (waitpid(-1, 0, WNOHANG) > 0) {} }

int main(void) {
  struct sigaction term = {.sa_handler = stop};
  struct sigaction child = {.sa_handler = reap, .sa_flags = SA_NOCLDSTOP | SA_RESTART};
  sigaction(SIGINT, &term, 0);
  sigaction(SIGTERM, &term, 0);
  sigaction(SIGCHLD, &child, 0);
  for (;;) pause();
}
"""

# Applets of busybox the tests' pods call (a shell, DNS lookups, HTTP, a listener).
BUSYBOX_APPLETS = ("sh", "nslookup", "wget", "nc", "sleep", "cat", "hostname", "ip", "ping", "echo", "httpd", "ls")


class ImageError(Exception):
    """An image cannot be made or loaded; the message says what to do."""


def images_dir() -> Path:
    """Where image archives of every area are kept: `${GRPO_INFRA_CACHE}/images`."""
    return cache_root().parent / "images"


def _sha(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


def _layer(files: dict[str, tuple[bytes | str, int]]) -> bytes:
    """An uncompressed, reproducible layer tar: path -> (content, mode); a str content is a symlink."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
        dirs = sorted({str(Path(*Path(p).parts[:i])) for p in files for i in range(1, len(Path(p).parts))})
        for d in dirs:
            info = tarfile.TarInfo(d)
            info.type, info.mode, info.mtime = tarfile.DIRTYPE, 0o755, 0
            tar.addfile(info)
        for path, (content, mode) in sorted(files.items()):
            info = tarfile.TarInfo(path)
            info.mode, info.mtime = mode, 0
            if isinstance(content, str):
                info.type, info.linkname = tarfile.SYMTYPE, content
                tar.addfile(info)
            else:
                info.size = len(content)
                tar.addfile(info, io.BytesIO(content))
    return buf.getvalue()


def write_archive(out: Path, ref: str, files: dict[str, tuple[bytes | str, int]], config: dict) -> Path:
    """One OCI image of one layer, as a tar at `out`, named `ref`."""
    layer = _layer(files)
    image_config = {
        "architecture": "amd64",
        "os": "linux",
        "config": config,
        "rootfs": {"type": "layers", "diff_ids": [_sha(layer)]},
    }
    config_blob = json.dumps(image_config, sort_keys=True).encode()
    manifest = json.dumps(
        {
            "schemaVersion": 2,
            "mediaType": "application/vnd.oci.image.manifest.v1+json",
            "config": {
                "mediaType": "application/vnd.oci.image.config.v1+json",
                "digest": _sha(config_blob),
                "size": len(config_blob),
            },
            "layers": [
                {"mediaType": "application/vnd.oci.image.layer.v1.tar", "digest": _sha(layer), "size": len(layer)}
            ],
        },
        sort_keys=True,
    ).encode()
    index = json.dumps(
        {
            "schemaVersion": 2,
            "manifests": [
                {
                    "mediaType": "application/vnd.oci.image.manifest.v1+json",
                    "digest": _sha(manifest),
                    "size": len(manifest),
                    "annotations": {
                        "io.containerd.image.name": ref,
                        "org.opencontainers.image.ref.name": ref.rsplit(":", 1)[-1],
                    },
                }
            ],
        }
    ).encode()
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_suffix(".tmp")
    with tarfile.open(tmp, "w") as tar:

        def add(name: str, data: bytes) -> None:
            info = tarfile.TarInfo(name)
            info.size, info.mode, info.mtime = len(data), 0o644, 0
            tar.addfile(info, io.BytesIO(data))

        add("oci-layout", b'{"imageLayoutVersion":"1.0.0"}')
        add("index.json", index)
        for blob in (layer, config_blob, manifest):
            add(f"blobs/sha256/{_sha(blob).split(':')[1]}", blob)
    tmp.replace(out)
    return out


def _cached(name: str, key: bytes) -> Path:
    """`images/<name>-<hash of what it is made from>.tar`: made once per content."""
    return images_dir() / "local" / f"{name}-{hashlib.sha256(key).hexdigest()[:16]}.tar"


def pause_archive() -> Path:
    """The pause image: PAUSE_C compiled static (a few hundred KiB), made once."""
    out = _cached("pause", PAUSE_C.encode())
    if out.is_file():
        return out
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        raise ImageError("no C compiler for the pause image: apt-get install gcc libc6-dev")
    build = out.parent / "pause-build"
    build.mkdir(parents=True, exist_ok=True)
    (build / "pause.c").write_text(PAUSE_C)
    proc = subprocess.run(
        [cc, "-static", "-Os", "-s", "-o", str(build / "pause"), str(build / "pause.c")],
        capture_output=True,
        text=True,
        check=False,
    )
    if proc.returncode != 0:
        raise ImageError(f"pause image: {cc} failed: {proc.stderr.strip().splitlines()[-1:]} (needs libc6-dev)")
    binary = (build / "pause").read_bytes()
    shutil.rmtree(build, ignore_errors=True)
    return write_archive(out, PAUSE_REF, {"pause": (binary, 0o755)}, {"Entrypoint": ["/pause"]})


def tools_archive(busybox: Path = Path("/bin/busybox")) -> Path:
    """A tools image from Debian's static busybox (package busybox-static): a shell, nslookup,
    wget, nc. The tests run their probes of pod networking and DNS in it."""
    if not busybox.is_file():
        raise ImageError(f"no static busybox at {busybox}: apt-get install busybox-static")
    files: dict[str, tuple[bytes | str, int]] = {"bin/busybox": (busybox.read_bytes(), 0o755)}
    files.update({f"bin/{applet}": ("busybox", 0o777) for applet in BUSYBOX_APPLETS})
    files["etc/passwd"] = (b"root:x:0:0:root:/root:/bin/sh\n", 0o644)
    files["tmp/.keep"] = (b"", 0o644)
    config = {"Cmd": ["/bin/sh"], "Env": ["PATH=/bin"]}
    out = _cached(
        "tools",
        repr(
            sorted((p, c if isinstance(c, str) else hashlib.sha256(c).hexdigest(), m) for p, (c, m) in files.items())
        ).encode(),
    )
    return out if out.is_file() else write_archive(out, TOOLS_REF, files, config)


def load_images(containerd_socket: Path, paths: list[Path], ctr: str | None = None) -> None:
    """Import image archives into one node's containerd, in the CRI's namespace (`k8s.io`), unpacked
    for its snapshotter, so the kubelet finds them without pulling."""
    ctr = ctr or shutil.which("ctr") or "ctr"
    for path in paths:
        proc = subprocess.run(
            [ctr, "--address", str(containerd_socket), "-n", "k8s.io", "images", "import", str(path)],
            capture_output=True,
            text=True,
            check=False,
            timeout=900,
            env={**os.environ},
        )
        if proc.returncode != 0:
            raise ImageError(f"ctr images import {path}: {proc.stderr.strip() or proc.stdout.strip()}")
