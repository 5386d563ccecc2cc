"""`grpo-infra kube`: a real Kubernetes control plane on this machine, with Kueue, KubeRay and fake GPU
nodes from a stack's pools (the Kubernetes twin of `grpo-infra sandbox`)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from ..kube import cluster as kube
from ..kube.plan import KubeError
from .common import RootOption, console, fail, load
from .lab import KeepOnFailureOption, add_lab_verbs

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
    keep_on_failure: KeepOnFailureOption = False,
    root: RootOption = None,
) -> None:
    """Start the cluster (cleaning up any earlier one first) and wait until nodes and operators are ready."""
    loaded = load(stack, root)
    if nodes not in kube.NODE_MODES:
        fail(f"--nodes must be one of {', '.join(kube.NODE_MODES)}, not {nodes!r}")
    if operators not in kube.OPERATOR_MODES:
        fail(f"--operators must be one of {', '.join(kube.OPERATOR_MODES)}, not {operators!r}")
    try:
        state = kube.up(
            stack,
            loaded.environment,
            nodes=nodes,
            cpu_nodes=cpu_nodes,
            operators=operators,
            keep_on_failure=keep_on_failure,
        )
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


add_lab_verbs(app, kube, KubeError, "kube")  # type: ignore[arg-type]
