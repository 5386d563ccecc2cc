"""A node's containerd root cloned from a seed (grpo_infra/kube/nodeseed.py): the seed's image files are
shared, the databases containerd writes are the node's own, so one node's writes reach neither the seed
nor its siblings. (The seeds themselves run on every real node of the cluster tests.)"""

from __future__ import annotations

import json
from pathlib import Path

from grpo_infra.kube import nodeseed

# What containerd v1.6 writes in its root after an image is in: its metadata and the overlayfs snapshotter's.
DATABASES = ("io.containerd.metadata.v1.bolt/meta.db", "io.containerd.snapshotter.v1.overlayfs/metadata.db")


def seed_root(tmp_path: Path) -> Path:
    root = tmp_path / "seed"
    blob = root / "io.containerd.content.v1.content/blobs/sha256/ab"
    layer = root / "io.containerd.snapshotter.v1.overlayfs/snapshots/1/fs/usr/bin/python3"
    for path in (blob, layer, *(root / name for name in DATABASES)):
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(b"seed")
    layer.chmod(0o755)
    return root


def test_a_nodes_root_shares_the_seeds_files_and_owns_its_databases(tmp_path: Path) -> None:
    seed = seed_root(tmp_path)
    nodes = [tmp_path / f"node-{i}" / "containerd" for i in range(2)]
    for node in nodes:
        node.mkdir(parents=True)  # as prepare_node leaves it
        nodeseed.clone(seed, node)
    first, second = nodes
    for name in DATABASES:
        (first / name).write_bytes(b"node-0 wrote this")
        assert (seed / name).read_bytes() == b"seed"
        assert (second / name).read_bytes() == b"seed"
    layer = "io.containerd.snapshotter.v1.overlayfs/snapshots/1/fs/usr/bin/python3"
    assert (first / layer).stat().st_ino == (seed / layer).stat().st_ino
    assert (first / layer).stat().st_mode & 0o777 == 0o755
    blob = "io.containerd.content.v1.content/blobs/sha256/ab"
    assert (second / blob).samefile(seed / blob)


def test_the_closest_seed_is_the_one_sharing_the_most_bytes(tmp_path: Path) -> None:
    for name, held in (("small", {"sha256:a": 10}), ("big", {"sha256:b": 500, "sha256:c": 1})):
        (tmp_path / name).mkdir()
        (tmp_path / name / "blobs.json").write_text(json.dumps({"containerd": "v1", "blobs": held}))
    needed = {"sha256:a": 10, "sha256:b": 500, "sha256:new": 2}
    assert nodeseed._closest(tmp_path, needed, "v1") == tmp_path / "big"
    assert nodeseed._closest(tmp_path, needed, "v2") is None
    assert nodeseed._closest(tmp_path, {"sha256:z": 1}, "v1") is None
