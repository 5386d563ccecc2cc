"""Every rule `check` knows, one record each: what `Violation.rule` may name, how bad it is, where it
applies, and the line docs/check.md prints for it.

The rules themselves live in `grpo_infra/check/`; this is their index, a fact below both the spec and
the checks (the spec validates a stack's waivers with it, the checks make violations with it). It is what a stack's
`checks.waive` is checked against when the stack loads, what `Violation` refuses an unknown id against,
and what the rule tables of docs/check.md are generated from (`python -m grpo_infra.check.rule_tables
docs/check.md`), so the docs, the code and a stack's waivers name the same rules. It imports nothing
of grpo_infra (the `facts` contract in pyproject.toml).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

Severity = Literal["error", "warning"]
Target = Literal["any", "kubernetes", "slurm"]
# docs/check.md's rule tables, one per section, in the order the page shows them.
SECTIONS = ("both", "stand-in", "kubernetes", "kinds", "slurm", "launchers", "image", "warnings")
Section = Literal["both", "stand-in", "kubernetes", "kinds", "slurm", "launchers", "image", "warnings"]
# The launchers whose Ray ports and interface are judged by Slurm's rules, under their own ids.
LAUNCHERS = ("ray", "skypilot", "dstack")

# Why a stack may not waive a rule: breaking it leaves nothing right to render or build.
NOTHING_TO_RENDER = "nothing of the job's kind can be rendered without it"
WRONG_TARGET = "the target cannot render the kind at all"
NO_LOCK = "the build installs the lock: without a current one it builds another image than declared; run `grpo-infra image lock STACK`"


@dataclass(frozen=True)
class Rule:
    """One rule: its id (what `Violation.rule` names), `error` (refuses the stack) or `warning` (never
    does), the target it can fire on, its docs/check.md table, the one-line doc, and, for rules that
    restate an upstream check, where that check lives (the table's extra column)."""

    id: str
    severity: Severity
    target: Target
    section: Section
    doc: str
    source: str = ""
    unwaivable: str = ""
    """Why `checks.waive` may not name this rule; empty: it may."""

    @property
    def waivable(self) -> bool:
        return not self.unwaivable


_RULES = (
    Rule(
        "tenant-quota",
        "error",
        "any",
        "both",
        "the gang's GPUs fit the tenant's `gpuQuota` (a gang larger than its quota is never admitted)",
    ),
    Rule(
        "layout-role-quota",
        "error",
        "any",
        "both",
        "each role of a disaggregated job fits the tenant's GPU quota: on Kubernetes on the role's pool (Kueue "
        "admits every role's pod set together or none), on Slurm with every other role (the QOS counts each "
        "component of the heterogeneous job); one short role keeps the whole job waiting",
        source="Kueue v0.19.2 `pkg/controller/jobs/raycluster/common.go` BuildPodSets (one Workload); Slurm 22.05 "
        "heterogeneous_jobs.html (each component counts against limits)",
    ),
    Rule(
        "layout-placement",
        "error",
        "any",
        "both",
        "verl can only have placed each role of a disaggregated job on its own pool: verl 0.9.1 asks Ray for GPUs "
        "by count only, so another role's pool may not offer a trainer node's worth of GPUs on one node, and a "
        "reward model shares the rollout's pool",
        source="`single_controller/ray/base.py:146-158,195-216`; `workers/rollout/replica.py:189-208`; "
        "`experimental/fully_async_policy/fully_async_main.py:77-84`",
    ),
    Rule(
        "layout-target",
        "error",
        "any",
        "both",
        "a disaggregated job runs without launchers: they start one pool's gang (on Slurm it is one heterogeneous "
        "job, a component per role)",
        unwaivable="the launcher would start a gang without the rollout's nodes",
    ),
    Rule(
        "verl-train-vs-mini",
        "error",
        "any",
        "both",
        "`batch.train ≥ batch.mini`",
        source="`workers/config/actor.py`, `ActorConfig.validate`",
    ),
    Rule(
        "verl-train-mini-divisible",
        "error",
        "any",
        "both",
        "`batch.train` is a multiple of `batch.mini`",
        source="`utils/tensordict_utils.py`, `make_iterator`",
    ),
    Rule(
        "verl-samples-per-gpu",
        "error",
        "any",
        "both",
        "`batch.train × rollout.groupSize` divides over every GPU of the gang",
        source="`utils/config.py`, `validate_config`",
    ),
    Rule(
        "verl-mini-per-gpu",
        "error",
        "any",
        "both",
        "`batch.mini × rollout.groupSize` divides over every GPU (FSDP data-parallel size)",
        source="`workers/engine_workers.py`, `train_mini_batch`",
    ),
    Rule(
        "verl-micro-vs-mini",
        "error",
        "any",
        "both",
        "`batch.microPerGpu` is no larger than each GPU's share of a mini batch",
        source="`workers/engine_workers.py`, `train_mini_batch`",
    ),
    Rule(
        "verl-rollout-tp",
        "error",
        "any",
        "both",
        "`rollout.tensorParallel` divides the GPUs of a node (a TP group never spans nodes): the rollout pool's "
        "node for a disaggregated job",
        source="`workers/rollout/vllm_rollout/vllm_async_server.py`; `workers/rollout/replica.py:113-116`",
    ),
    Rule(
        "checkpoint-retention",
        "error",
        "any",
        "both",
        "with a declared `checkpoint.volume.sizeGib`: the checkpoints verl keeps fit it — max(`checkpoint.keep`, 2) × 12 B per parameter (fp32 parameters and Adam's two moments; the model's size from `modelParamsBillion` or its name), and `keep: null` (every checkpoint) is refused. `keep` (default 3) is rendered as `trainer.max_actor_ckpt_to_keep` / `max_critic_ckpt_to_keep`",
        source="`trainer/config/ppo_trainer.yaml`; `utils/checkpoint/checkpoint_manager.py` `ensure_checkpoint_capacity` (the previous checkpoint stays until the new one is saved); `utils/checkpoint/fsdp_checkpoint_manager.py`",
    ),
    Rule(
        "checkpoint-shared",
        "error",
        "any",
        "both",
        "a multi-node gang checkpoints to one file system every node writes to, or a restarted gang cannot resume: on Kubernetes a ReadWriteMany `claimName`, `nfs`, or a `hostPath` declared `hostPathShared: true`; on Slurm a `checkpoint.dir` (through the container's mounts) under `slurm.sharedPaths`; for SkyPilot and dstack a bucket with `mode: MOUNT` (not `MOUNT_CACHED`, whose writes reach other nodes only after an asynchronous upload, nor `COPY`) or a volume declared `shared: true`; a dstack network volume never is (one instance at a time)",
    ),
    Rule(
        "image-variant-gpus",
        "error",
        "any",
        "stand-in",
        "`image.variant: cpu` (the CPU image `grpo-infra image build` makes) only on a pool of placeholder GPUs: on real GPUs it would hold the gang and use none",
    ),
    Rule(
        "image-variant-target",
        "error",
        "any",
        "stand-in",
        "`image.variant: cpu` only on Kubernetes: Slurm nodes run `slurm.container`'s image or their own installation",
    ),
    Rule(
        "probe-target",
        "error",
        "any",
        "stand-in",
        "`job.probe` only on Kubernetes: the sbatch runs verl, and the Slurm sandbox runs the probe through `GRPO_ENTRYPOINT`",
    ),
    Rule(
        "probe-grpo-infra",
        "error",
        "kubernetes",
        "stand-in",
        "`job.probe` needs grpo-infra in what the pods run (`image.contents.grpoInfra`, or the CPU variant)",
    ),
    Rule(
        "vllm-unknown-env",
        "warning",
        "any",
        "both",
        'a `VLLM_*` variable in `job.env` that the image\'s vLLM does not define (vLLM 0.24.0: the names of its `vllm/envs.py`, stored in `grpo_infra/check/vllm_env.py`; other releases are not judged). vLLM only logs "Unknown vLLM environment variable detected" and ignores it. `VLLM_ATTENTION_BACKEND` is one: set `+actor_rollout_ref.rollout.engine_kwargs.vllm.attention_backend` in `job.overrides`, which verl passes to `vllm serve` as `--attention-backend`',
        source="`workers/rollout/vllm_rollout/vllm_async_server.py` (`engine_kwargs`, `build_cli_args_from_config`); vllm 0.24.0 `vllm/envs.py` `validate_environ`, `vllm/engine/arg_utils.py` `attention_backend`",
    ),
    Rule(
        "image-engine-transformers",
        "warning",
        "any",
        "both",
        "the built image's lock installs a transformers outside the rollout engine's own requirement (sglang 0.5.12 requires `transformers==5.6.0`; verl 0.9.1's `sglang` extra pins 5.9.0, which the lock takes as an override, as verl's own uv environment does, stored in `grpo_infra/check/engine_pins.py`; other releases are not judged): the engine runs on a transformers it was not released against",
        source="`setup.py` extra `sglang` (`transformers==5.9.0`); sglang 0.5.12 wheel METADATA `Requires-Dist: transformers==5.6.0`",
    ),
    Rule(
        "probe-real-gpus",
        "warning",
        "kubernetes",
        "stand-in",
        "the probe on real GPUs checks placement and checkpoints and trains nothing",
    ),
    Rule(
        "kuberay-webhook",
        "error",
        "kubernetes",
        "kubernetes",
        "the RayJob passes KubeRay's and Kueue's webhooks: name a DNS-1035 label of at most 47 characters, at most 16 worker groups in K8sJobMode, no group named `head` or `submitter`, no `clusterSelector`, `shutdownAfterJobFinishes` with `suspend`, no in-tree autoscaling, `replicas = minReplicas = maxReplicas`, ClusterIP head",
    ),
    Rule(
        "kueue-admission",
        "error",
        "kubernetes",
        "kubernetes",
        "Kueue would admit the gang: the LocalQueue leads to a ClusterQueue, the priority class exists, and every pod set (head, each worker group × replicas × hosts, the submitter) finds a flavor whose taints it tolerates, whose node labels match its node selector, and whose nominal quota holds it together with the other pod sets, in some combination Kueue's scans reach. `by` is the shortfall per resource on the pool's flavor in Kueue's first scan",
    ),
    Rule(
        "gpu-pool-taint",
        "error",
        "kubernetes",
        "kubernetes",
        "the gang's pool has a `NoSchedule` (or `NoExecute`) taint, which its workers tolerate: each worker asks for a whole node, so any other pod on a GPU node (the Ray head, the submitter, another team's pod) leaves a worker Pending. EKS and GKE pools are refused without their GPU taint when the stack is loaded; this rule covers existing clusters",
    ),
    Rule(
        "pod-fits-node",
        "error",
        "kubernetes",
        "kubernetes",
        "each worker pod, with the stack's DaemonSets on its node and `nodeReserve`, fits the node's allocatable: the memory the kernel shows (measured per machine type, `kernelMemoryGib`, or the nominal size less 3.5 %), less the provider's published reservation (GKE tiers, EKS AL2023 nodeadm, an existing cluster's stated reserve; docs/kubernetes.md \"What a node gives\"); the message prints the arithmetic, `by` the shortfall",
    ),
    Rule(
        "pod-fits-real-node",
        "error",
        "kubernetes",
        "kubernetes",
        "with `--kubeconfig`: the worker plus the stack's DaemonSets fits the smallest `status.allocatable` of the pool's real Nodes",
    ),
    Rule(
        "pool-nodes-exist",
        "error",
        "kubernetes",
        "kubernetes",
        "with `--kubeconfig`: every host of an existing cluster's pool is a Node of that cluster",
    ),
    Rule(
        "capacity-block-walltime",
        "error",
        "kubernetes",
        "kubernetes",
        "on a Capacity Block, `rayJob.activeDeadlineSeconds` is set and fits from the block's start to its scale-in (docs/kubernetes.md \"Capacity Blocks\"; EC2 terminates the block's instances at its end)",
    ),
    Rule(
        "gke-driver-version",
        "error",
        "kubernetes",
        "kubernetes",
        'a GKE pool does not ask for `DEFAULT` when the image\'s CUDA needs an R570 driver or newer (CUDA 13.0: ≥ 580.65.06); docs/node-pools.md "The NVIDIA driver on GKE"',
    ),
    Rule(
        "eks-ami-driver",
        "error",
        "kubernetes",
        "kubernetes",
        "an EKS pool's pinned AMI release (`eks.releaseVersion`) ships an NVIDIA driver at least as new as the image's CUDA needs (CUDA 13.0: ≥ 580.65.06, from 1.34's release 20251023; the table per Kubernetes version in docs/node-pools.md \"The NVIDIA driver on EKS\")",
    ),
    Rule(
        "device-hostpath",
        "error",
        "kubernetes",
        "kubernetes",
        "no Ray pod mounts a host device directory (`/dev/...`): devices come from the device plugin; on EKS a `/dev/infiniband` hostPath in an EFA pod breaks EFA (aws-samples/aws-do-eks #54, #63)",
    ),
    Rule(
        "socket-interface-link-local",
        "error",
        "kubernetes",
        "kubernetes",
        "`NCCL_SOCKET_IFNAME`/`GLOO_SOCKET_IFNAME` name no link-local interface (`lo`, `docker*`, `veth*`, EKS Pod Identity's `pod-id-link0`): no other node reaches it and NCCL's bootstrap hangs (aws-do-eks #54, #63). With nothing to name (host networking, no `fabric.interfaces`) the pods get `NCCL_SOCKET_IFNAME=^lo,docker,pod-id-link,veth` (NCCL: `^` excludes prefixes, https://docs.nvidia.com/deeplearning/nccl/user-guide/docs/env.html#nccl-socket-ifname), and EFA pods `NCCL_NET=\"AWS Libfabric\"`, so a missing aws-ofi-nccl plugin is an error, not a silent fall back to sockets (env.html#nccl-net; the plugin answers to that name in every release, aws/aws-ofi-nccl#530)",
    ),
    Rule(
        "machine-shape",
        "error",
        "kubernetes",
        "kubernetes",
        "a pool's (and the head pool's) `cpus` and `memoryGib` are those of its EC2 instance type or GCE machine type, for the types the project knows (`MACHINE_SHAPES` in `grpo_infra/k8s/allocatable.py`)",
    ),
    Rule(
        "head-fits-node",
        "error",
        "kubernetes",
        "kubernetes",
        "the head and the submitter each fit a node of `kubernetes.headPool` (allocatable minus `nodeReserve`)",
    ),
    Rule(
        "head-pool-capacity",
        "error",
        "kubernetes",
        "kubernetes",
        "the tenants' `ray-head` quotas together admit no more head + submitter pairs than the head pool holds",
    ),
    Rule(
        "path-on-volume",
        "error",
        "kubernetes",
        "kubernetes",
        "`job.modelPath`, every data file and `checkpoint.dir` lie on a volume mounted in the head and the workers (a path without a leading `/`, such as a hub model id, is not checked)",
    ),
    Rule(
        "pod-socket-interface",
        "error",
        "kubernetes",
        "kubernetes",
        "`NCCL_SOCKET_IFNAME`/`GLOO_SOCKET_IFNAME` in a pod without `hostNetwork` name only the pod's interfaces (`eth0`, or the secondary network's)",
    ),
    Rule(
        "host-ports-block",
        "error",
        "kubernetes",
        "kubernetes",
        "with `network.mode: host`, the job's host port block (sized from the pool's CPUs and GPUs) ends at port 65535 or below",
        unwaivable=NOTHING_TO_RENDER,
    ),
    Rule(
        "host-ports-ephemeral",
        "error",
        "kubernetes",
        "kubernetes",
        "with `network.mode: host`, the job's host port block stays out of 32768–60999",
    ),
    Rule(
        "ttl-after-finish",
        "error",
        "kubernetes",
        "kubernetes",
        "under Kueue, `rayJob.ttlSecondsAfterFinished` ≤ 60 s (Kueue frees the quota when the job ends; the GPU pods go only after the TTL)",
    ),
    Rule(
        "resource-provided",
        "error",
        "kubernetes",
        "kubernetes",
        "every extended resource a pod requests is advertised: by a device plugin the stack installs, by GKE, or listed in `kubernetes.providedResources`",
    ),
    Rule(
        "eks-topology-layer-3",
        "error",
        "kubernetes",
        "kubernetes",
        "an EKS topology of `network-node-layer-*` levels includes `topology.k8s.aws/network-node-layer-3`, the most selective",
    ),
    Rule(
        "pod-security",
        "error",
        "kubernetes",
        "kubernetes",
        "the namespace's enforced Pod Security level admits the job's pods (`kubernetes.podSecurity` not stricter than they pass)",
    ),
    Rule(
        "head-pool-one-node",
        "warning",
        "kubernetes",
        "kubernetes",
        'on an existing cluster, a `headPool` of one node shares it between the RayJob\'s head and its submitter, so a head node lost for good leaves the RayJob `Running` until someone deletes the Node or taints it `node.kubernetes.io/out-of-service` (no cloud does it there; docs/kubernetes.md "When the head is lost"); two head nodes keep the submitter away from its head',
    ),
    Rule(
        "raycronjob-tick-names",
        "warning",
        "kubernetes",
        "kubernetes",
        'a `raycronjob` under KubeRay 1.6.2 gets one run per tick from a MutatingAdmissionPolicy naming each run by its tick (kuberay#4849, fixed in 1.7.0), which needs Kubernetes 1.36 or later (docs/kubernetes.md, "The RayCronJob")',
    ),
    Rule(
        "job-kind-target",
        "error",
        "any",
        "kinds",
        "`job.kind` other than `rayjob` only on a Kubernetes stack",
        unwaivable=WRONG_TARGET,
    ),
    Rule(
        "raycluster-lifetime",
        "error",
        "kubernetes",
        "kinds",
        "`kubernetes.rayCluster.maxExecutionHours` longer than `podsReadyTimeoutMinutes` + the gate's timeout, and only under Kueue (which enforces it); `forever` must be said",
    ),
    Rule(
        "raycronjob-schedule",
        "error",
        "kubernetes",
        "kinds",
        "a `raycronjob` has `kubernetes.rayCronJob.schedule`",
        unwaivable=NOTHING_TO_RENDER,
    ),
    Rule(
        "raycronjob-concurrency",
        "error",
        "kubernetes",
        "kinds",
        "`concurrencyPolicy: Allow`: KubeRay's RayCronJob has no other",
    ),
    Rule("raycronjob-scheduler", "error", "kubernetes", "kinds", "Kueue: the runs carry no Volcano labels"),
    Rule(
        "raycronjob-resume",
        "error",
        "kubernetes",
        "kinds",
        "`checkpoint.resume: disable`: every run shares the job's checkpoint directory",
    ),
    Rule(
        "slurm-time-limit",
        "error",
        "slurm",
        "slurm",
        "the job's `timeLimit` fits the partition's `maxTime` (otherwise sbatch leaves it pending)",
    ),
    Rule(
        "slurm-ports-ephemeral",
        "error",
        "slurm",
        "slurm",
        "`rayPorts` stays clear of the kernel's ephemeral range 32768–60999, where any client socket can take a port before Ray binds it",
    ),
    Rule(
        "slurm-ports-shared-nodes",
        "error",
        "slurm",
        "slurm",
        "when nodes are shared (`oversubscribe` not `exclusive`), the range holds at least two port blocks",
    ),
    Rule(
        "slurm-ports-block",
        "error",
        "slurm",
        "slurm",
        "`rayPorts` holds one job's port block, sized from the pool's CPUs and GPUs: a worker port for every worker, I/O worker and driver a node's Ray may hold (`grpo_infra/ports.py`), or tasks and actors fail to start",
        unwaivable=NOTHING_TO_RENDER,
    ),
    Rule(
        "slurm-interface",
        "error",
        "slurm",
        "slurm",
        "the interface Ray and NCCL bind to is one of the pool's fabric interfaces, when the pool names them",
    ),
    Rule(
        "slurm-node-layout",
        "error",
        "slurm",
        "slurm",
        "each `slurm.nodeLayouts` entry names a known pool, and its Sockets × CoresPerSocket × ThreadsPerCore is the pool's `cpus` (as `slurmd -C` reports it; otherwise slurmd drains the node), and whose `memSpecLimitMib` leaves memory for jobs",
    ),
    Rule(
        "slurm-qos-shared",
        "error",
        "slurm",
        "slurm",
        "no two tenants name the same `queue`: a QOS holds one `GrpTRES=gres/gpu` quota",
    ),
    Rule(
        "slurm-checkpoint-window",
        "error",
        "slurm",
        "slurm",
        "the time limit holds the 120 s signal lead plus one save (`checkpointSaveSeconds`), so verl can checkpoint before the time limit",
    ),
    Rule(
        "slurm-requeue-resume",
        "error",
        "slurm",
        "slurm",
        "`checkpoint.resume` is `auto`: the job requeues itself at the time limit, and a run that does not resume starts from step 0",
    ),
    Rule(
        "launcher-path-storage",
        "error",
        "any",
        "launchers",
        "SkyPilot, dstack: `job.modelPath`, every data file and `checkpoint.dir` lie under a `launchers.<launcher>.storage` path (the nodes are provisioned for the run and hold nothing the task does not attach; a path without a leading `/` is fetched by verl and not checked)",
    ),
    Rule(
        "dstack-fleet-storage",
        "error",
        "any",
        "launchers",
        "dstack: no job path lies on an `instancePath` of a cloud fleet the stack renders (dstack provisions those hosts from its backends' images and mounts nothing there); an SSH fleet (`fleet.ssh`) or a network volume",
        "dstack 0.22.5 `FleetConfiguration` (dstack/_internal/core/models/fleets.py), dstack.ai/docs/concepts/volumes",
    ),
    Rule(
        "dstack-fleet-hosts",
        "error",
        "any",
        "launchers",
        "dstack: an SSH fleet lists at least the gang's nodes as hosts",
        "dstack 0.22.5 `SSHParams.hosts`",
    ),
    Rule(
        "ray-ports-block",
        "error",
        "any",
        "launchers",
        "`launchers.ray.rayPorts` holds one job's port block, sized from the pool's CPUs and GPUs",
        unwaivable=NOTHING_TO_RENDER,
    ),
    Rule(
        "ray-ports-ephemeral",
        "error",
        "any",
        "launchers",
        "`launchers.ray.rayPorts` stays clear of the kernel's ephemeral range",
    ),
    Rule(
        "skypilot-ports-block",
        "error",
        "any",
        "launchers",
        "`launchers.skypilot.rayPorts` holds one job's port block, sized from the pool's CPUs and GPUs",
        unwaivable=NOTHING_TO_RENDER,
    ),
    Rule(
        "skypilot-ports-ephemeral",
        "error",
        "any",
        "launchers",
        "`launchers.skypilot.rayPorts` stays clear of the kernel's ephemeral range",
    ),
    Rule(
        "dstack-ports-block",
        "error",
        "any",
        "launchers",
        "`launchers.dstack.rayPorts` holds one job's port block, sized from the pool's CPUs and GPUs",
        unwaivable=NOTHING_TO_RENDER,
    ),
    Rule(
        "dstack-ports-ephemeral",
        "error",
        "any",
        "launchers",
        "`launchers.dstack.rayPorts` stays clear of the kernel's ephemeral range",
    ),
    Rule(
        "ray-ports-shared-nodes",
        "error",
        "any",
        "launchers",
        "the `ray` launcher's range holds at least two port blocks (hand-started clusters share machines, one run id each)",
    ),
    Rule(
        "ray-ports-overlap",
        "error",
        "any",
        "launchers",
        "two Ray port ranges used on the same named hosts do not overlap: `slurm.rayPorts` and `launchers.ray.rayPorts` of one stack (both run Ray on the pool's nodes), and either of them against another stack of the project whose pool names some of the same hosts; job J of one and run R of the other could take the same block and break both clusters (one line: the two ranges, the shared hosts, by how many ports)",
    ),
    Rule(
        "ray-interface",
        "error",
        "any",
        "launchers",
        "`launchers.ray.interface`, when given, is one of the pool's fabric interfaces",
    ),
    Rule(
        "skypilot-interface",
        "error",
        "any",
        "launchers",
        "`launchers.skypilot.interface`, when given, is one of the pool's fabric interfaces",
    ),
    Rule(
        "dstack-interface",
        "error",
        "any",
        "launchers",
        "`launchers.dstack.interface`, when given, is one of the pool's fabric interfaces",
    ),
    Rule(
        "slurm-path-shared",
        "warning",
        "slurm",
        "warnings",
        "`job.modelPath`, every data file and `checkpoint.dir` lie on a file system the stack declares shared (`slurm.sharedPaths`, e.g. `/lustre`); under a container runtime the path is first mapped through `slurm.container.mounts` to the node's path, and a path inside the image only is flagged too",
    ),
    Rule(
        "slurm-node-layout-missing",
        "warning",
        "slurm",
        "warnings",
        "every pool has a `slurm.nodeLayouts` entry; without one Slurm takes each CPU for a one-core socket and binds tasks without regard to the real sockets",
    ),
    Rule(
        "slurm-qos-default",
        "warning",
        "slurm",
        "warnings",
        "no tenant's `queue` is `normal`, every account's default QOS: accounting.sh's quota on it would cap everyone",
    ),
    Rule(
        "slurm-quota-unenforced",
        "warning",
        "slurm",
        "warnings",
        "`slurm.accounting` is `slurmdbd`; with `none` (no slurmdbd) no tenant quota holds on Slurm",
    ),
    Rule(
        "image-verl-missing",
        "error",
        "any",
        "image",
        "the image declares no verl: `python3 -m verl.trainer.main_ppo` would fail at once",
    ),
    Rule(
        "image-verl-unsupported",
        "error",
        "any",
        "image",
        "the declared verl release has no stored trainer config (supported: 0.7.0, 0.9.1)",
    ),
    Rule("image-python", "error", "any", "image", "the image's Python is outside the verl release's `Requires-Python`"),
    Rule(
        "image-engine",
        "error",
        "any",
        "image",
        "`rollout.name` names an engine the image lacks (verl publishes one image per engine)",
    ),
    Rule(
        "image-engine-pairing",
        "error",
        "any",
        "image",
        "a build would install an engine version the verl release's extra does not accept (pip could not resolve it)",
    ),
    Rule(
        "image-ray-version",
        "error",
        "kubernetes",
        "image",
        "`kubernetes.rayJob.rayVersion` is set and differs from the image's Ray. KubeRay v1.7.0 gives Ray containers HTTP probes on `/api/healthz` from rayVersion 2.53.0 and `wget` exec probes below it (`ray-operator/controllers/ray/common/pod.go:721-730, 743, 777-781`; path in `utils/constant.go:344`): a wrong rayVersion leaves the pods never Ready, and Kueue evicts and requeues the gang at `waitForPodsReady`'s timeout. Leave `rayVersion` unset",
    ),
    Rule(
        "image-token-auth",
        "error",
        "any",
        "image",
        "`rayAuth: token` (either target) with an image Ray older than 2.52.0: KubeRay refuses token mode below it (`utils/validation.go:284-298`); on Slurm an older Ray ignores `RAY_AUTH_MODE` and runs open",
    ),
    Rule(
        "image-rdma",
        "error",
        "any",
        "image",
        "the gang's pool has fabric `infiniband` or `roce` and the image does not have the verbs userspace: a prebuilt image without `rdma: true`, or a built one with `rdma: false`. NCCL's IB transport dlopens libibverbs and falls back to TCP sockets without it (NVIDIA/nccl `src/misc/ibvsymbols.cc`)",
    ),
    Rule(
        "image-efa",
        "error",
        "any",
        "image",
        "the gang's pool has fabric `efa` and the image no EFA userspace: NCCL would fall back to TCP sockets",
    ),
    Rule(
        "image-pyxis-digest",
        "error",
        "slurm",
        "image",
        "`image.digest` is set while pyxis pulls `ref`: enroot's URI has no digest form, so the pin would be lost; import the pinned image and set `slurm.container.image`",
    ),
    Rule(
        "image-gate-nccl-tests",
        "error",
        "slurm",
        "image",
        "Slurm's nccl fabric gate runs `allReducePerf` in an image without nccl-tests, unless `allReducePerf` is a path under a `slurm.container.mounts` target (a host build mounted in: the supported alternative)",
    ),
    Rule(
        "image-gate-grpo-infra",
        "error",
        "slurm",
        "image",
        "Slurm's fabric gate (either backend) runs `python3 -m grpo_infra...` in an image without grpo-infra. On Kubernetes the gate's code travels in a ConfigMap, so the image needs neither",
    ),
    Rule(
        "image-lock-missing",
        "error",
        "any",
        "image",
        "the image is built (`image.build`) and `stacks/locks/<stack>.txt` does not exist",
        unwaivable=NO_LOCK,
    ),
    Rule(
        "image-lock-stale",
        "error",
        "any",
        "image",
        "the lock's `# inputs:` digest is not the one `image.contents` gives now (a version, the engine, the attention implementation, the Python or the base's Ubuntu changed), or a top-level pin (verl, the engine, Ray, torch, flash-attn) was edited or removed from the lock",
        unwaivable=NO_LOCK,
    ),
    Rule(
        "image-attention-cuda",
        "error",
        "any",
        "image",
        "`attention: flash_attention_2` on an image without CUDA: flash-attn is CUDA kernels only; use `sdpa`",
    ),
    Rule(
        "verl-override-key",
        "error",
        "any",
        "image",
        "a key verl receives (derived or from `job.overrides`) is not in the declared verl release's own trainer config; `+key` adds a key on purpose and is not checked",
    ),
)

RULES: dict[str, Rule] = {rule.id: rule for rule in _RULES}
