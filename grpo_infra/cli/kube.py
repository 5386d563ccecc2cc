"""`grpo-infra kube`: a real Kubernetes control plane on this machine, with Kueue, KubeRay and fake GPU
nodes from a stack's pools (the Kubernetes twin of `grpo-infra sandbox`)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from ..kube import cluster as kube
from ..kube.plan import KubeError
from .common import RootOption, console, fail, load

app = typer.Typer(
    help="A local Kubernetes (etcd, API server, scheduler, controller manager, Kueue, KubeRay, and the "
    "stack's nodes: real kubelets and containers, or KWOK).",
    no_args_is_help=True,
)

StackOption = Annotated[str, typer.Option("--stack", help="Stack whose pools become the GPU nodes.")]
NodesOption = Annotated[
    str,
    typer.Option(
        "--nodes",
        help="real: a kubelet and containerd per node, fake GPUs by device plugin; fake: KWOK nodes "
        "(admission and scale checks); auto: real where this machine allows (root, containerd).",
    ),
]
CpuNodesOption = Annotated[
    int,
    typer.Option(
        "--cpu-nodes",
        help="Untainted nodes for Ray heads and job submitters (grpo-cpu-0, ...). With 2, a job's submitter "
        "runs apart from its head and fails the attempt when the head's node is lost (docs/kubernetes.md).",
    ),
]
OperatorsOption = Annotated[
    str,
    typer.Option(
        "--operators",
        help="charts (real nodes): `grpo-infra up` installs Kueue and KubeRay from the stack's Helm charts, as pods, "
        "as on a cloud; processes: both run on this machine, ready at once; auto: charts on real nodes, processes "
        "with KWOK nodes (docs/local-kubernetes.md).",
    ),
]


@app.command()
def up(
    stack: StackOption = "local-k8s",
    nodes: NodesOption = "auto",
    cpu_nodes: CpuNodesOption = 1,
    operators: OperatorsOption = "auto",
    root: RootOption = None,
) -> None:
    """Start the cluster (cleaning up any earlier one first) and wait until nodes and operators are ready."""
    loaded = load(stack, root)
    if nodes not in kube.NODE_MODES:
        fail(f"--nodes must be one of {', '.join(kube.NODE_MODES)}, not {nodes!r}")
    if operators not in kube.OPERATOR_MODES:
        fail(f"--operators must be one of {', '.join(kube.OPERATOR_MODES)}, not {operators!r}")
    try:
        state = kube.up(stack, loaded.environment, nodes=nodes, cpu_nodes=cpu_nodes, operators=operators)
    except KubeError as exc:
        fail(str(exc))
    if state.get("images_note"):
        console.print(state["images_note"], highlight=False, markup=False)
    if state.get("fake_because"):
        console.print(f"fake (KWOK) nodes: {state['fake_because']}", highlight=False, markup=False)
    console.print(
        f"kube up in {state['seconds']}s: {len(state['nodes'])} {state['nodes_mode']} nodes {' '.join(state['nodes'])}"
    )
    if state.get("operators") == "charts":
        console.print(
            f"operators: none yet; `grpo-infra up {stack}` installs Kueue and KubeRay from their charts",
            highlight=False,
        )
    console.print('use it with: eval "$(grpo-infra kube env)"; kubectl get nodes', highlight=False)


@app.command("load")
def load_images(
    archives: Annotated[
        list[Path] | None, typer.Argument(help="OCI archives (default: the stack's job image).")
    ] = None,
) -> None:
    """Import image archives into every real node of the running cluster (after `grpo-infra image build`)."""
    try:
        loaded = kube.load(archives=archives or None)
    except KubeError as exc:
        fail(str(exc), code=1)
    for path in loaded:
        console.print(f"loaded {path} into every node", highlight=False)


NodeArgument = Annotated[str, typer.Argument(help="A node of the local cluster (kubectl get nodes).")]


@app.command("kill-node")
def kill_node(name: NodeArgument) -> None:
    """Kill a real node the way a machine dies (kubelet, containerd, containers at once): a node-loss drill."""
    try:
        killed = kube.kill_node(name)
    except KubeError as exc:
        fail(str(exc), code=1)
    console.print(f"killed {len(killed)} processes of node {name}; it goes NotReady once its heartbeats stop")


@app.command("boot-node")
def boot_node(name: NodeArgument) -> None:
    """Start a killed node again, as a machine that rebooted (its disks kept)."""
    try:
        kube.boot_node(name)
    except KubeError as exc:
        fail(str(exc), code=1)
    console.print(f"booted node {name}")


@app.command()
def down() -> None:
    """Stop every process of the local cluster and remove its files."""
    for line in kube.down():
        console.print(line, highlight=False)
    console.print("kube down")


@app.command()
def status() -> None:
    """The cluster's processes and its nodes as the API server sees them."""
    try:
        console.print(kube.status(), highlight=False, markup=False)
    except KubeError as exc:
        fail(str(exc), code=1)


@app.command()
def env() -> None:
    """Print shell exports that point kubectl and pulumi at the local cluster (use with eval)."""
    try:
        text = kube.env_exports()
    except KubeError as exc:
        fail(str(exc), code=1)
    typer.echo(text)
