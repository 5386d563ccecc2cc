"""Readiness barrier of the GRPO sbatch: wait until every node and every GPU has joined Ray.

The sbatch embeds this file and runs it with `python3 -c` at the same moment as it starts the job's
Ray cluster, so its interpreter start and `import ray` overlap the head's start-up; it waits for the
head's GCS port itself. Training starts the moment the cluster is whole, not after a guessed sleep.
It prints a line each time the count changes ("joined 2/3 nodes, 16/24 GPUs") and exits 1 at the
timeout with the counts and the nodes still missing. Standard library and Ray only: it runs inside
the image.

The count comes from the GCS's node table over Ray's own GCS client (`ray._raylet.GcsClient`, as
`ray status` uses it: python/ray/scripts/scripts.py line 2392, Ray 2.60), not from a Ray driver:
`ray.init` would wait for this node's raylet, polling the process table once a second
(get_node_to_connect_for_driver, python/ray/_private/services.py lines 512-581), and the raylet answers a first
driver by starting idle worker processes, CPU the other nodes need to start in the meantime.

With `--gate MODULE ARGS...` it then connects as a driver and runs the fabric gate
(`MODULE.main(ARGS)`, the in-job all-reduce) in this same process, on this same connection: one
interpreter start and one `import ray` between a whole cluster and training. Exit 0: ready (and the
gate passed); 1: not ready; 3: the gate failed (its verdict printed above).
"""

import argparse
import importlib
import socket
import sys
import time

GATE_FAILED = 3
# Seconds between two looks at the node table, and between two connection attempts to the GCS port.
POLL_SECONDS = 0.1
GCS_CONNECT_POLL_SECONDS = 0.05


def wait_for_port(address: str, deadline: float) -> bool:
    """True once something accepts a TCP connection at host:port, False at the deadline."""
    host, _, port = address.rpartition(":")
    while True:
        try:
            with socket.create_connection((host, int(port)), timeout=1):
                return True
        except OSError:
            if time.monotonic() > deadline:
                return False
            time.sleep(GCS_CONNECT_POLL_SECONDS)


def connect(address: str):
    """A GCS client of the head at `address`, or None while it cannot answer."""
    from ray._raylet import GcsClient

    try:
        return GcsClient(address=address)
    except Exception:
        return None


def alive_nodes(gcs) -> list | None:
    """The GCS's alive nodes (GcsNodeInfo), or None when it does not answer. A client keeps the cluster id of
    the GCS it first reached, so a head started again while the nodes join (ray_start_again) answers only a new
    client."""
    from ray.core.generated.gcs_pb2 import GcsNodeInfo

    if gcs is None:
        return None
    try:
        return list(gcs.get_all_node_info(timeout=5, state_filter=GcsNodeInfo.GcsNodeState.ALIVE).values())
    except Exception:
        return None


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--address", required=True, help="GCS address host:port of this job's head")
    parser.add_argument("--nodes", type=int, required=True, help="nodes the allocation has")
    parser.add_argument("--gpus", type=int, required=True, help="GPUs the allocation has in all")
    parser.add_argument("--timeout", type=float, required=True, help="seconds before giving up")
    parser.add_argument("--hosts", default="", help="comma-separated node names, to name the missing ones")
    parser.add_argument(
        "--node-ip-address", default=None, help="this node's Ray address (spares Ray's IP auto-detection)"
    )
    parser.add_argument("--gate", nargs=argparse.REMAINDER, default=None, help="then run MODULE.main(ARGS...)")
    args = parser.parse_args()
    deadline = time.monotonic() + args.timeout

    import ray

    if not wait_for_port(args.address, deadline):
        print(f"grpo: ERROR: cannot reach this job's Ray head at {args.address}", file=sys.stderr, flush=True)
        return 1
    gcs = connect(args.address)

    last = None
    nodes, gpus, alive = 0, 0, []
    while True:
        answer = alive_nodes(gcs)
        if answer is None:
            gcs = connect(args.address)  # the counts stay the last ones the head told
        else:
            alive = answer
        nodes, gpus = len(alive), int(sum(n.resources_total.get("GPU", 0) for n in alive))
        if (nodes, gpus) != last:
            print(f"grpo: joined {nodes}/{args.nodes} nodes, {gpus}/{args.gpus} GPUs", flush=True)
            last = (nodes, gpus)
        if nodes >= args.nodes and gpus >= args.gpus:
            return run_gate(ray, args) if args.gate else 0
        if time.monotonic() > deadline:
            break
        time.sleep(POLL_SECONDS)

    joined = {n.node_manager_hostname.split(".")[0] for n in alive}
    missing = [h for h in args.hosts.split(",") if h and h.split(".")[0] not in joined]
    if len(missing) != args.nodes - nodes:
        missing = []  # Ray's hostnames are not the Slurm node names here: naming nodes would mislead
    print(
        f"grpo: ERROR: Ray readiness timeout after {args.timeout:g} s: joined {nodes}/{args.nodes} nodes, "
        f"{gpus}/{args.gpus} GPUs" + (f"; missing: {','.join(missing)}" if missing else ""),
        file=sys.stderr,
        flush=True,
    )
    return 1


def run_gate(ray, args: argparse.Namespace) -> int:
    """The cluster is whole: connect as a driver and run the gate on this connection."""
    try:
        ray.init(
            address=args.address,
            logging_level="ERROR",
            log_to_driver=False,
            _node_ip_address=args.node_ip_address,
        )
    except (ConnectionError, RuntimeError) as exc:
        print(f"grpo: ERROR: cannot reach this job's Ray head at {args.address}: {exc}", file=sys.stderr)
        return 1
    try:
        gate = importlib.import_module(args.gate[0])
        code = gate.main([*args.gate[1:], "--address", args.address])
    finally:
        ray.shutdown()
    return 0 if code == 0 else GATE_FAILED


if __name__ == "__main__":
    sys.exit(main())
