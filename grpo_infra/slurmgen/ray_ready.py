"""Readiness barrier of the GRPO sbatch: wait until every node and every GPU has joined Ray.

The sbatch embeds this file and runs it with `python3 -c` after starting the job's Ray cluster,
so training starts the moment the cluster is whole, not after a guessed sleep. It prints a line
each time the count changes ("joined 2/3 nodes, 16/24 GPUs") and exits 1 at the timeout with
the counts and the nodes still missing. Standard library and Ray only: it runs inside the image.

With `--gate MODULE ARGS...` it then runs the fabric gate (`MODULE.main(ARGS)`, the in-job
all-reduce) in this same process, on this same Ray connection: one interpreter start, one
`import ray`, one `ray.init` fewer between a whole cluster and training. Exit 0: ready (and the
gate passed); 1: not ready; 3: the gate failed (its verdict printed above).
"""

import argparse
import importlib
import sys
import time

GATE_FAILED = 3


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

    while True:
        try:
            ray.init(
                address=args.address,
                logging_level="ERROR",
                log_to_driver=False,
                _node_ip_address=args.node_ip_address,
            )
            break
        except (ConnectionError, RuntimeError) as exc:
            if time.monotonic() > deadline:
                print(f"grpo: ERROR: cannot reach this job's Ray head at {args.address}: {exc}", file=sys.stderr)
                return 1
            time.sleep(0.5)

    last = None
    nodes, gpus, alive = 0, 0, []
    while True:
        alive = [n for n in ray.nodes() if n.get("Alive")]
        nodes, gpus = len(alive), int(sum(n.get("Resources", {}).get("GPU", 0) for n in alive))
        if (nodes, gpus) != last:
            print(f"grpo: joined {nodes}/{args.nodes} nodes, {gpus}/{args.gpus} GPUs", flush=True)
            last = (nodes, gpus)
        if nodes >= args.nodes and gpus >= args.gpus:
            if args.gate:
                gate = importlib.import_module(args.gate[0])
                code = gate.main([*args.gate[1:], "--address", args.address])
                ray.shutdown()
                return 0 if code == 0 else GATE_FAILED
            ray.shutdown()
            return 0
        if time.monotonic() > deadline:
            break
        time.sleep(0.2)

    joined = {str(n.get("NodeManagerHostname", "")).split(".")[0] for n in alive}
    missing = [h for h in args.hosts.split(",") if h and h.split(".")[0] not in joined]
    if len(missing) != args.nodes - nodes:
        missing = []  # Ray's hostnames are not the Slurm node names here: naming nodes would mislead
    print(
        f"grpo: ERROR: Ray readiness timeout after {args.timeout:g} s: joined {nodes}/{args.nodes} nodes, "
        f"{gpus}/{args.gpus} GPUs" + (f"; missing: {','.join(missing)}" if missing else ""),
        file=sys.stderr,
        flush=True,
    )
    ray.shutdown()
    return 1


if __name__ == "__main__":
    sys.exit(main())
