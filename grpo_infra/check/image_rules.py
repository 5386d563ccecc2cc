"""Does the job's image hold what the job runs? Refused before any GPU is held.

Each rule is a way a stack ran the wrong image: the job then fails only after admission (verl
missing, the gate's tools missing), stalls (KubeRay's probes against an older Ray agent), or runs
slowly without anyone noticing (NCCL over sockets on EFA). The facts each rule relies on are cited
inline; the runtime guard (grpo_infra/image/guard.py) holds a prebuilt image to its declaration.
"""

from __future__ import annotations

from .. import verl
from ..image import gate_tools, host_provided, rollout_engine, verl_config_keys, verl_release
from ..image.lock import stale
from ..spec import ENVIRONMENT_KEY, Environment
from ..spec.image import release
from ..spec.kubernetes import TOKEN_AUTH_MIN_RAY
from .violation import Violation

IMAGE = f"{ENVIRONMENT_KEY}.image"
CONTENTS = f"{IMAGE}.contents"
# KubeRay v1.7.0 ray-operator/controllers/ray/common/pod.go:721-730 (supportsUnifiedHealthCheck): from
# rayVersion 2.53.0 the Ray containers get HTTP probes on /api/healthz (utils/constant.go:344) of the
# dashboard agent, which an older Ray does not serve; below it, wget exec probes (pod.go:777-781).
HTTP_PROBES_MIN_RAY = "2.53.0"


def image_violations(env: Environment) -> list[Violation]:
    """Every way the declared image cannot run this stack's job."""
    return [
        *_verl(env),
        *_engine(env),
        *_ray(env),
        *_efa(env),
        *_rdma(env),
        *_gate_tools(env),
        *_pyxis_digest(env),
        *_overrides(env),
        *_lock(env),
        *_attention(env),
    ]


def _lock(env: Environment) -> list[Violation]:
    # The build installs the committed lock (`pip install --require-hashes --no-deps`): without one there is
    # nothing to install, and a lock resolved from other inputs would build another image than declared.
    build = env.image.build
    if build is None:
        return []
    if build.lock is None:
        return [
            Violation(
                "image-lock-missing",
                f"{IMAGE}.build",
                "the image is built but has no lock at stacks/locks/<stack>.txt: run `grpo-infra image lock <stack>`",
            )
        ]
    problem = stale(env.image, build.lock)
    if problem is None:
        return []
    return [
        Violation(
            "image-lock-stale",
            f"{CONTENTS}",
            f"stacks/locks/<stack>.txt {problem}: run `grpo-infra image lock <stack>` and commit the lock",
        )
    ]


def _attention(env: Environment) -> list[Violation]:
    # flash-attn is CUDA kernels only (its setup.py builds nvcc extensions; transformers refuses
    # flash_attention_2 without a CUDA device): an image without CUDA cannot hold or use it.
    contents = env.image.contents
    if contents.attention == "flash_attention_2" and contents.cuda is None:
        return [
            Violation(
                "image-attention-cuda",
                f"{CONTENTS}.attention",
                "attention flash_attention_2 (verl's default) needs flash-attn, which needs CUDA; the image declares "
                "none: set attention: sdpa",
            )
        ]
    return []


def _pyxis_digest(env: Environment) -> list[Violation]:
    # pyxis takes an enroot URI, `[USER@][REGISTRY#]IMAGE[:TAG]` (NVIDIA/pyxis README, NVIDIA/enroot
    # doc/cmd/import.md): a tag, never a digest, so a digest pin cannot be honoured by pulling `ref`.
    slurm = env.slurm
    if slurm is None or slurm.container.runtime != "pyxis" or slurm.container.image is not None:
        return []
    if env.image.digest is None:
        return []
    return [
        Violation(
            "image-pyxis-digest",
            f"{IMAGE}.digest",
            "pyxis pulls image.ref by tag (enroot URIs have no digest form), so the digest would not be honoured; "
            "import the pinned image with enroot and set slurm.container.image to the squashfs",
        )
    ]


def _verl(env: Environment) -> list[Violation]:
    contents = env.image.contents
    if contents.verl is None:
        # verl's install docs have users of its images install verl themselves (`pip3 install --no-deps -e .`,
        # volcengine/verl docs/start/install.rst:82-88); its Dockerfiles uninstall it (Dockerfile.stable.vllm:102-103).
        return [
            Violation(
                "image-verl-missing",
                f"{CONTENTS}.verl",
                f"the image has no verl: `{' '.join(verl.entrypoint(env))}` fails at once; build the image from the "
                "stack (image.build) or use one with verl installed",
            )
        ]
    found = verl_release(env)
    if found is None:
        return [
            Violation(
                "image-verl-unsupported",
                f"{CONTENTS}.verl",
                f"verl {contents.verl} has no stored trainer config to check the command line against; "
                "supported: " + ", ".join(sorted(_supported())),
            )
        ]
    if not found.python_ok(contents.python):
        return [
            Violation(
                "image-python",
                f"{CONTENTS}.python",
                f"verl {found.version} requires Python {found.python}, the image declares {contents.python}",
            )
        ]
    return []


def _supported() -> list[str]:
    from ..image.verl_releases import RELEASES

    return list(RELEASES)


def _engine(env: Environment) -> list[Violation]:
    contents, wanted = env.image.contents, rollout_engine(env)
    if contents.engine is None or wanted != contents.engine.name:
        have = f"{contents.engine.name} {contents.engine.version}" if contents.engine else "no rollout engine"
        return [
            Violation(
                "image-engine",
                f"{ENVIRONMENT_KEY}.job.rollout.engine",
                f"rollout.name is {wanted or 'unset'} but the image has {have} (verl publishes one image per engine)",
            )
        ]
    found = verl_release(env)
    if env.image.build is not None and found is not None and not found.pairs_with(wanted, contents.engine.version):
        pairing = found.engines.get(wanted, "none")
        return [
            Violation(
                "image-engine-pairing",
                f"{CONTENTS}.engine.version",
                f"verl {found.version}'s `{wanted}` extra requires {wanted}{pairing}, "
                f"the build would install {contents.engine.version}: pip cannot resolve it",
            )
        ]
    return []


def _ray_auth(env: Environment) -> str:
    if env.kubernetes is not None:
        return env.kubernetes.ray_job.ray_auth
    assert env.slurm is not None
    return env.slurm.ray_auth


def _ray(env: Environment) -> list[Violation]:
    ray = env.image.contents.ray
    out: list[Violation] = []
    stated = env.kubernetes.ray_job.ray_version if env.kubernetes is not None else None
    if stated is not None and stated != ray:
        probes = ""
        if (release(stated) >= release(HTTP_PROBES_MIN_RAY)) != (release(ray) >= release(HTTP_PROBES_MIN_RAY)):
            probes = (
                f"; KubeRay 1.7.0 picks its probes by rayVersion (HTTP /api/healthz from {HTTP_PROBES_MIN_RAY}), "
                "so the pods never become Ready and Kueue evicts the gang at waitForPodsReady's timeout"
            )
        out.append(
            Violation(
                "image-ray-version",
                f"{ENVIRONMENT_KEY}.kubernetes.rayJob.rayVersion",
                f"rayVersion {stated} is not the image's Ray {ray}{probes}; drop rayVersion (it comes from the image)",
            )
        )
    # Ray's token authentication first shipped in 2.52.0: KubeRay v1.7.0 refuses `authOptions.mode: token`
    # below it (ray-operator/controllers/ray/utils/validation.go:284-298); an older Ray on Slurm ignores
    # RAY_AUTH_MODE and runs unauthenticated.
    if _ray_auth(env) == "token" and release(ray) < release(TOKEN_AUTH_MIN_RAY):
        target = "kubernetes.rayJob" if env.kubernetes is not None else "slurm"
        out.append(
            Violation(
                "image-token-auth",
                f"{CONTENTS}.ray",
                f"rayAuth: token needs Ray >= {TOKEN_AUTH_MIN_RAY}, the image has Ray {ray} "
                f"(use a newer image or set {target}.rayAuth: disabled)",
            )
        )
    return out


def _efa(env: Environment) -> list[Violation]:
    pool = env.gang.pool
    if pool.fabric.kind == "efa" and not env.image.contents.efa:
        return [
            Violation(
                "image-efa",
                f"{CONTENTS}.efa",
                f"pool {pool.name} talks EFA but the image has no EFA userspace (libfabric, aws-ofi-nccl): "
                "NCCL falls back to TCP sockets",
            )
        ]
    return []


def _rdma(env: Environment) -> list[Violation]:
    # NCCL's IB transport (InfiniBand and RoCE) opens libibverbs and its providers; without them it falls
    # back to TCP sockets (NVIDIA/nccl src/misc/ibvsymbols.cc). A build installs them for such a pool; a
    # prebuilt image must say it has them, and no image may say it lacks them there.
    pool, contents = env.gang.pool, env.image.contents
    if not pool.fabric.verbs:
        return []
    built_with_it = env.image.build is not None and contents.rdma is not False
    if built_with_it or contents.rdma:
        return []
    return [
        Violation(
            "image-rdma",
            f"{CONTENTS}.rdma",
            f"pool {pool.name} talks {pool.fabric.kind} but the image does not declare the RDMA verbs userspace "
            "(rdma-core, libibverbs1, ibverbs-providers): NCCL falls back to TCP sockets; install it and set rdma: true",
        )
    ]


def _gate_tools(env: Environment) -> list[Violation]:
    all_reduce_perf, needs_grpo_infra = gate_tools(env)
    contents, out = env.image.contents, []
    gate = f"{ENVIRONMENT_KEY}.job.preflight.nccl"
    if all_reduce_perf is not None and not contents.nccl_tests and not host_provided(env, all_reduce_perf):
        out.append(
            Violation(
                "image-gate-nccl-tests",
                f"{CONTENTS}.ncclTests",
                f"the fabric gate runs {all_reduce_perf} in the image, which has no nccl-tests (exit 127 before Ray); "
                "build them in (ncclTests: true) or mount a host build and set allReducePerf to its path there",
                "",
            )
        )
    if needs_grpo_infra and not contents.grpo_infra:
        out.append(
            Violation(
                "image-gate-grpo-infra",
                f"{CONTENTS}.grpoInfra",
                "the fabric gate runs `python3 -m grpo_infra...` in the image, which lacks grpo-infra "
                f"(ModuleNotFoundError before training); build it in (grpoInfra: true) or set {gate}.enabled: false",
            )
        )
    return out


def _overrides(env: Environment) -> list[Violation]:
    keys = verl_config_keys(env)
    if keys is None:
        return []
    out: list[Violation] = []
    for key, _ in verl.overrides(env):
        # `+key` adds a key on purpose (Hydra's append syntax); any other key must exist in verl's config.
        if not key.startswith("+") and key not in keys:
            where = f"{ENVIRONMENT_KEY}.job.overrides.{key}" if key in env.job.overrides else f"{ENVIRONMENT_KEY}.job"
            out.append(
                Violation(
                    "verl-override-key",
                    where,
                    f"{key} is not a key of verl {env.image.contents.verl}'s trainer config: verl refuses to start",
                )
            )
    return out
