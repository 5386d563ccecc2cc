"""A node's disk with its images already on it: containerd roots made once per set of image blobs.

Every real node runs its own containerd, and each imported the job's image (`ctr images import`):
250-500 MiB of gzip layer, decompressed and unpacked once per node, all nodes at once on the same
cores (most of a rehearsal's node boot). A cloud node does not pay that on every boot either: it
starts from a disk image with the images already pulled (kind's node image, an EKS AMI's image cache).

A seed is such a disk: a containerd root (content store, overlayfs snapshots, metadata) into which
the archives were imported once, by a containerd of its own. A node's root starts as hard links to
the seed's files, which containerd never writes again once a blob or a committed snapshot exists
(overlayfs copies a lower file up before changing it); its two bolt databases, which containerd does
write, are copied. The nodes then import the archives as before and find everything there.

Seeds live under the kube cache (`node-seeds/`), named by the blobs they hold. A new set of archives
(a code change rebuilds only the job image's small top layer) starts from the seed that shares the
most bytes with it, so the base layer is unpacked once per base, not once per commit.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import shutil
import subprocess
import tarfile
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path

from ..localnode.run import LocalNodeError, run
from ..processes import stop, wait_for
from .plan import KubeError
from .versions import cache_root

# What containerd writes after a blob or snapshot exists: its metadata and the snapshotter's. Copied,
# not linked, into each node.
DATABASES = ("io.containerd.metadata.v1.bolt/meta.db", "io.containerd.snapshotter.v1.overlayfs/metadata.db")
BLOB_PREFIX = "blobs/sha256/"
# Seeds kept (the newest by use): one per stack's image base, with room for a few.
KEEP = 8
START_TIMEOUT = 60.0


def seeds_dir() -> Path:
    return cache_root() / "node-seeds"


def blobs(archives: list[Path]) -> dict[str, int]:
    """Every blob the archives hold (OCI image layout: `blobs/sha256/<hex>`), digest -> size, read
    from the tar headers alone."""
    out: dict[str, int] = {}
    for archive in archives:
        with tarfile.open(archive) as tar:
            for member in tar:
                if member.isfile() and member.name.startswith(BLOB_PREFIX):
                    out["sha256:" + member.name[len(BLOB_PREFIX) :]] = member.size
    return out


def seed_key(needed: dict[str, int], containerd_version: str) -> str:
    return hashlib.sha256(json.dumps([containerd_version, sorted(needed)]).encode()).hexdigest()[:20]


@contextlib.contextmanager
def seeded(archives: list[Path], containerd: str, ctr: str, unshare: str) -> Iterator[Path]:
    """The root of a seed holding every blob of `archives`, imported and unpacked for overlayfs; made
    now unless one exists (from the seed sharing the most bytes with them). Held for the block: no
    other process removes it (the newest KEEP are kept) while nodes are cloned from it."""
    needed = blobs(archives)
    version = _version(containerd)
    home = seeds_dir()
    home.mkdir(parents=True, exist_ok=True)
    final = home / seed_key(needed, version)
    with _locked(home / ".lock"):
        if not (final / "blobs.json").is_file():
            base = _closest(home, needed, version)
            work = Path(tempfile.mkdtemp(dir=home, prefix=".seed-"))
            try:
                if base is not None:
                    clone(base / "root", work / "root")
                _import(work, archives, containerd, ctr, unshare)
                (work / "blobs.json").write_text(json.dumps({"containerd": version, "blobs": needed}) + "\n")
                shutil.rmtree(final, ignore_errors=True)
                work.rename(final)
            finally:
                shutil.rmtree(work, ignore_errors=True)
        (final / "blobs.json").touch()
        _keep_newest(home, final)
        yield final / "root"


def clone(source: Path, target: Path) -> None:
    """`target` as hard links to `source`'s files, but for containerd's databases, which are copied."""
    target.parent.mkdir(parents=True, exist_ok=True)
    _run(["cp", "-a", "--link", "-T", str(source), str(target)], timeout=600)
    for name in DATABASES:
        db = target / name
        if db.is_file():
            db.unlink()
            shutil.copy2(source / name, db)


def _version(containerd: str) -> str:
    return run([containerd, "--version"], check=False).strip() or "unknown"


def _closest(home: Path, needed: dict[str, int], version: str) -> Path | None:
    """The seed sharing the most bytes with `needed`, made by the same containerd; None when none shares any."""
    best, shared = None, 0
    for record in home.glob("*/blobs.json"):
        with contextlib.suppress(OSError, ValueError):
            held = json.loads(record.read_text())
            if held.get("containerd") != version:
                continue
            common = sum(size for digest, size in needed.items() if digest in held.get("blobs", {}))
            if common > shared:
                best, shared = record.parent, common
    return best


def _config(work: Path) -> str:
    """A containerd of the seed's own: its root, state and socket under `work`, no CRI (nothing runs)."""
    return f"""version = 2
root = "{work / "root"}"
state = "{work / "state"}"
disabled_plugins = [
  "io.containerd.grpc.v1.cri", "io.containerd.internal.v1.opt",
  "io.containerd.snapshotter.v1.aufs", "io.containerd.snapshotter.v1.btrfs",
  "io.containerd.snapshotter.v1.devmapper", "io.containerd.snapshotter.v1.zfs",
  "io.containerd.tracing.processor.v1.otlp", "io.containerd.internal.v1.tracing",
]

[grpc]
  address = "{work / "state" / "containerd.sock"}"

[metrics]
  address = ""
"""


def _import(work: Path, archives: list[Path], containerd: str, ctr: str, unshare: str) -> None:
    """Start the seed's containerd (its mounts in a private mount namespace), import every archive into
    the CRI's namespace, then stop it so its databases are closed before they are copied."""
    (work / "state").mkdir(parents=True)
    config = work / "containerd.toml"
    config.write_text(_config(work))
    log = work / "containerd.log"
    socket = work / "state" / "containerd.sock"
    with log.open("wb") as out:
        daemon = subprocess.Popen(
            [unshare, "--mount", "--propagation", "private", containerd, "--config", str(config)],
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
    try:
        started = KubeError(f"the node seed's containerd did not start after {START_TIMEOUT:.0f}s; see {log}")
        wait_for(lambda: socket.is_socket() or daemon.poll() is not None, START_TIMEOUT, started)
        if not socket.is_socket():
            raise KubeError(f"the node seed's containerd exited: {log.read_text()[-2000:]}")
        _import_held(lambda *args: _ctr(ctr, socket, *args), archives)
    finally:
        stop([daemon.pid], grace=30)
        daemon.wait()


def _import_held(ctr: Callable[..., str], archives: list[Path]) -> None:
    """Import `archives` into a root cloned from an older seed, its images held meanwhile.

    An archive's image usually keeps its name and changes its top layer. Importing it repoints the name,
    and containerd's garbage collector (which runs on its own during a long import) then finds the old
    image's snapshots unreferenced, the shared base layers' among them, and may remove them while the new
    top layer is being unpacked onto them ("parent snapshot ... does not exist"). A second name for every
    image already there keeps them; once the new images are unpacked (and so reference their base), the
    held names go, synchronously, and with them only what no image uses any more."""
    held = []
    for i, name in enumerate(ctr("images", "ls", "-q").split()):
        held.append(f"seed.invalid/held/{i}:held")
        ctr("images", "tag", "--force", name, held[-1])
    for archive in archives:
        ctr("images", "import", str(archive))
    if held:
        ctr("images", "rm", "--sync", *held)


def _ctr(ctr: str, socket: Path, *args: str) -> str:
    """One `ctr` command in the CRI's namespace of the seed's containerd; its output."""
    return _run([ctr, "--address", str(socket), "-n", "k8s.io", *args], timeout=900)


def _run(cmd: list[str], timeout: float) -> str:
    """The local-node layer's one command, its failure as the seed's KubeError line."""
    try:
        return run(cmd, timeout=timeout)
    except LocalNodeError as exc:
        raise KubeError(f"node seed: {exc}") from None


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    """One seed made at a time on this machine (a rehearsal and a benchmark may boot nodes at once)."""
    with path.open("a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        yield


def _keep_newest(home: Path, keep: Path) -> None:
    seeds = sorted(
        (p.parent for p in home.glob("*/blobs.json")), key=lambda p: (p / "blobs.json").stat().st_mtime, reverse=True
    )
    for old in seeds[KEEP:]:
        if old != keep:
            shutil.rmtree(old, ignore_errors=True)
