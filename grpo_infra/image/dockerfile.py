"""`DIR/STACK/image/`: the Dockerfile that builds the stack's image, and the small files it copies.

Rendered only for a stack with `image.build`; the build installs exactly `image.contents`, so the
image the job declares and the image that is built cannot drift. Facts about upstream installs:
- verl's own images install Ray unpinned (`ray[default]` in
  volcengine/verl docker/verl0.6-cu128-torch2.8.0-fa2.7.4/Dockerfile.base:41) and install, then
  uninstall, verl (docker/Dockerfile.stable.vllm:102-103, Dockerfile.stable.sglang:39-40): here Ray is
  pinned to the declared release and verl stays installed, with the engine its wheel pairs with
  (`verl[<engine>]==X`, grpo_infra/image/verl_releases.py).
- EFA userspace: the EFA installer with `-y -g --skip-kmod --skip-limit-conf --no-verify` (userspace
  only, no kernel module in a container) and aws-ofi-nccl built against it, as verl's
  docker/aws/Dockerfile.extention.awsefa:17-39 does, at the versions it uses; configure options from
  aws/aws-ofi-nccl v1.14.2 INSTALL.md:25-37.
- nccl-tests: `make MPI=1 MPI_HOME=... CUDA_HOME=...` (NVIDIA/nccl-tests README.md:18) for the MPI
  build Slurm's gate launches one rank per GPU with `srun --mpi`.
The build runs the runtime guard against the result as its last step, so an image that does not
hold what the stack declares fails to build.
"""

from __future__ import annotations

from ..spec import Environment
from ..spec.image import Image
from . import guard_args
from .driver import driver_statement, min_driver
from .lock import ATTENTION_PACKAGE, pins, split

FOLDER = "image"
EFA_INSTALLER_VERSION = "1.40.0"
AWS_OFI_NCCL_VERSION = "1.14.2"
NCCL_TESTS_VERSION = "2.19.6"
# The commits those tags name (`git rev-parse v1.14.2^{commit}` in github.com/aws/aws-ofi-nccl,
# `v2.19.6^{commit}` in github.com/NVIDIA/nccl-tests): a tag can be moved, a commit cannot, so the build
# checks out the tag and stops unless it is this commit.
AWS_OFI_NCCL_COMMIT = "42f78e821deee7c5492b745b39760de81bbc0ac0"
NCCL_TESTS_COMMIT = "a0b82b2260cf5152b9f8c061bbf7eaf0ba096432"
# Where this project's files go in the image (the guard, and the wheel while it installs).
GRPO_DIR = "/opt/grpo-infra"
VENV = "/opt/venv"
# apt packages are not version-pinned: they come from the base image's Ubuntu release (pinned with the
# base digest), and Ubuntu's archive drops superseded versions, so exact pins would break every rebuild.
APT_PIN_NOTE = (
    "# apt versions follow the base image's Ubuntu release, pinned with the base digest (DL3008 justified)\n"
    "# hadolint ignore=DL3008"
)
GUARD_FILE = "image_guard.py"
LOCK_FILE = "requirements.lock"
SOURCE_LOCK_FILE = "source-build.lock"
# What the lock installs after the source build (lock.INSTALLED_AFTER): flash-attn-4 over flash-attn.
AFTER_LOCK_FILE = "after-source-build.lock"
# rdma-core's userspace, each named: `libibverbs1` only Recommends `ibverbs-providers` (the mlx5 provider
# NCCL's IB transport loads through libibverbs; Ubuntu noble's libibverbs1 control file), and
# --no-install-recommends would drop it. NCCL dlopens libibverbs.so at start and falls back to sockets
# when it cannot (NVIDIA/nccl src/misc/ibvsymbols.cc, src/transport/net_ib.cc).
RDMA_PACKAGES = ("rdma-core", "libibverbs1", "ibverbs-providers", "librdmacm1", "ibverbs-utils")
# flash-attn's setup.py: FLASH_ATTENTION_FORCE_BUILD skips downloading a prebuilt wheel from GitHub,
# FLASH_ATTN_CUDA_ARCHS (default 80;90;100;120) narrows the kernels to the pools' GPUs (H100: sm_90)
# (flash-attn 2.8.3 setup.py:61, 70). MAX_JOBS is left unset: setup.py then runs min(CPUs / 2,
# available GiB / 9) nvcc jobs, "each JOB peak memory cost is ~8-9GB when threads = 4" (setup.py:123-125,
# 508-521), and any MAX_JOBS turns that memory throttle off. A builder may still pass
# `--build-arg MAX_JOBS=N`: a declared ARG without a default reaches RUN's environment only when given
# (https://docs.docker.com/reference/dockerfile/#arg).
FLASH_ATTN_CUDA_ARCHS = "90"


# The named build context holding this project's checkout (`docker build --build-context project=DIR`,
# BuildKit; `buildah bud --build-context` likewise): the build makes the wheel from it.
PROJECT_CONTEXT = "project"


def rdma_userspace(env: Environment) -> bool:
    """Whether the build installs the RDMA verbs userspace: the gang's pool talks InfiniBand or RoCE, or
    the stack asks for it (`rdma: true`)."""
    return env.image.contents.rdma is True or (env.image.contents.rdma is None and env.gang.pool.fabric.verbs)


def _from(image: Image) -> str:
    assert image.build is not None
    base = image.build.base
    return f"FROM {base}@{image.build.base_digest}" if image.build.base_digest else f"FROM {base}"


def _summary(env: Environment) -> str:
    c = env.image.contents
    held = [f"Python {c.python}", f"CUDA {c.cuda or 'none'}", f"Ray {c.ray}"]
    if c.verl:
        held.append(f"verl {c.verl}")
    if c.engine:
        held.append(f"{c.engine.name} {c.engine.version}")
    held += [
        name
        for name, on in (("EFA userspace", c.efa), ("nccl-tests", c.nccl_tests), ("grpo-infra", c.grpo_infra))
        if on
    ]
    return ", ".join(held)


def _efa() -> list[str]:
    return [
        "# EFA userspace (libfabric, Open MPI) without the kernel module, then the aws-ofi-nccl plugin NCCL loads.",
        f"ARG EFA_INSTALLER_VERSION={EFA_INSTALLER_VERSION}",
        "# One layer: the sources are built and removed where they were unpacked (DL3003); apt as above (DL3008).",
        "# hadolint ignore=DL3003,DL3008",
        "RUN apt-get update \\",
        " && apt-get install -y --no-install-recommends autoconf automake libtool libhwloc-dev \\",
        ' && curl -fsSL "https://efa-installer.amazonaws.com/aws-efa-installer-${EFA_INSTALLER_VERSION}.tar.gz" \\',
        "    | tar -xz -C /tmp \\",
        " && cd /tmp/aws-efa-installer && ./efa_installer.sh -y -g --skip-kmod --skip-limit-conf --no-verify \\",
        *_pinned_clone(
            "https://github.com/aws/aws-ofi-nccl.git", AWS_OFI_NCCL_VERSION, AWS_OFI_NCCL_COMMIT, "/tmp/aws-ofi-nccl"
        ),
        " && cd /tmp/aws-ofi-nccl && ./autogen.sh \\",
        " && ./configure --prefix=/opt/amazon/ofi-nccl --with-libfabric=/opt/amazon/efa --with-cuda=/usr/local/cuda \\",
        "    --with-mpi=/opt/amazon/openmpi --enable-platform-aws \\",
        ' && make -j"$(nproc)" install \\',
        " && printf '%s\\n' /opt/amazon/ofi-nccl/lib /opt/amazon/efa/lib /opt/amazon/openmpi/lib > /etc/ld.so.conf.d/efa.conf \\",
        " && ldconfig \\",
        " && rm -rf /tmp/aws-efa-installer /tmp/aws-ofi-nccl /var/lib/apt/lists/*",
        "ENV PATH=/opt/amazon/openmpi/bin:/opt/amazon/efa/bin:$PATH",
    ]


def _pinned_clone(url: str, version: str, commit: str, where: str) -> list[str]:
    """RUN lines (continuations) cloning tag `v<version>` of `url` into `where`, stopping the build unless the
    tag names `commit`."""
    return [
        f" && git clone --depth 1 --branch v{version} {url} {where} \\",
        f' && test "$(git -C {where} rev-parse HEAD)" = {commit} \\',
    ]


def _rdma() -> list[str]:
    return [
        "# RDMA verbs userspace for the InfiniBand/RoCE fabric, every package named (the mlx5 provider is only",
        "# a Recommends of libibverbs1): without it NCCL cannot open libibverbs and trains over TCP sockets.",
        APT_PIN_NOTE,
        "RUN apt-get update \\",
        f" && apt-get install -y --no-install-recommends {' '.join(RDMA_PACKAGES)} \\",
        " && rm -rf /var/lib/apt/lists/*",
    ]


def _nccl_tests(efa: bool, python: str) -> list[str]:
    """nccl-tests built against the NCCL of torch's nvidia-nccl wheel: the gate measures the NCCL that trains."""
    mpi = "/opt/amazon/openmpi" if efa else "/usr/lib/x86_64-linux-gnu/openmpi"
    # The wheel ships lib/libnccl.so.2 and include/nccl.h but no libnccl.so for -lnccl: a link in a
    # build-only NCCL_HOME gives the linker one; the binary's NEEDED stays libnccl.so.2, and patchelf sets
    # its RUNPATH to the wheel's lib so the loader takes torch's NCCL before any libnccl2 of the base.
    nccl = f"{VENV}/lib/python{python}/site-packages/nvidia/nccl"
    # Open MPI: the EFA installer's under /opt/amazon/openmpi, else Ubuntu's.
    packages = "patchelf" if efa else "libopenmpi-dev openmpi-bin patchelf"
    apt = [
        APT_PIN_NOTE,
        "RUN apt-get update \\",
        f" && apt-get install -y --no-install-recommends {packages} \\",
        " && rm -rf /var/lib/apt/lists/*",
    ]
    return [
        "# nccl-tests with MPI: Slurm's fabric gate runs all_reduce_perf as one rank per GPU under srun --mpi,",
        "# linked against torch's NCCL (the nvidia-nccl wheel in the lock), not a distribution libnccl2.",
        *apt,
        "# One layer: the sources are built and removed where they were cloned.",
        f"RUN mkdir -p /tmp/nccl-home/lib && ln -s {nccl}/include /tmp/nccl-home/include \\",
        f" && ln -s {nccl}/lib/libnccl.so.2 /tmp/nccl-home/lib/libnccl.so \\",
        *_pinned_clone(
            "https://github.com/NVIDIA/nccl-tests.git", NCCL_TESTS_VERSION, NCCL_TESTS_COMMIT, "/tmp/nccl-tests"
        ),
        f' && make -C /tmp/nccl-tests -j"$(nproc)" MPI=1 MPI_HOME={mpi} CUDA_HOME=/usr/local/cuda NCCL_HOME=/tmp/nccl-home \\',
        " && install -m 0755 /tmp/nccl-tests/build/all_reduce_perf /usr/local/bin/all_reduce_perf \\",
        f" && patchelf --set-rpath {nccl}/lib /usr/local/bin/all_reduce_perf \\",
        " && rm -rf /tmp/nccl-tests /tmp/nccl-home",
    ]


def _python_set(env: Environment) -> list[str]:
    """The lock, installed as locked; flash-attn compiled from its hash-checked sdist against the locked torch."""
    lines = [
        "# Every Python package exactly as stacks/locks/<stack>.txt pins it, each file checked against its",
        "# sha256; --no-deps: the lock is the whole set, nothing is resolved here.",
        f"COPY {LOCK_FILE} {GRPO_DIR}/{LOCK_FILE}",
        f"RUN pip install --no-cache-dir --require-hashes --no-deps -r {GRPO_DIR}/{LOCK_FILE}",
    ]
    if ATTENTION_PACKAGE.get(env.image.contents.attention) == "flash-attn":
        lines += [
            "# flash-attn: PyPI has only its sdist, whose setup.py imports torch, so it is built here against the",
            "# torch installed above (--no-build-isolation), from the sdist the lock hashes, for the pools' GPUs.",
            f"COPY {SOURCE_LOCK_FILE} {GRPO_DIR}/{SOURCE_LOCK_FILE}",
            f"ARG FLASH_ATTN_CUDA_ARCHS={FLASH_ATTN_CUDA_ARCHS}",
            "# No MAX_JOBS unless --build-arg gives one: setup.py sizes nvcc's jobs to the builder's free memory",
            "# (about 9 GB each); a number turns that off.",
            "ARG MAX_JOBS",
            "RUN FLASH_ATTENTION_FORCE_BUILD=TRUE FLASH_ATTN_CUDA_ARCHS=${FLASH_ATTN_CUDA_ARCHS} \\",
            f"    pip install --no-cache-dir --require-hashes --no-deps --no-build-isolation -r {GRPO_DIR}/{SOURCE_LOCK_FILE}",
        ]
        after = sorted(_installed_after(env))
        if after:
            lines += [
                f"# {', '.join(after)} after flash-attn: both install flash_attn/cute/, and flash-attn 2.8.3's older",
                "# modules there would replace FA4's (sglang's fa4 backend imports flash_attn.cute); installed last,",
                "# FA4's are the ones on disk, flash-attn 2's own modules outside cute/ untouched (lock.INSTALLED_AFTER).",
                f"COPY {AFTER_LOCK_FILE} {GRPO_DIR}/{AFTER_LOCK_FILE}",
                f"RUN pip install --no-cache-dir --require-hashes --no-deps -r {GRPO_DIR}/{AFTER_LOCK_FILE}",
            ]
    return lines


def _installed_after(env: Environment) -> dict[str, str]:
    """What the build installs after the flash-attn build (by name: version); empty without a lock."""
    lock = env.image.build.lock if env.image.build else None
    return pins(split(lock)[2]) if lock is not None else {}


def dockerfile(env: Environment) -> str:
    """The Dockerfile of the stack's image build (`image.build`)."""
    image = env.image
    contents = image.contents
    python = f"python{contents.python}"
    lines = [
        "# Rendered by grpo-infra from the stack's `image` block; edit the stack and re-run `grpo-infra synth`.",
        f"# Holds: {_summary(env)}.",
        f"# Build from this folder and push to {image.ref} (docs/images.md).",
        *([f"# Runs on: {statement}."] if (statement := driver_statement(env)) else []),
        _from(image),
        "",
        'SHELL ["/bin/bash", "-o", "pipefail", "-c"]',
        "ENV DEBIAN_FRONTEND=noninteractive \\",
        "    PIP_NO_CACHE_DIR=1 \\",
        "    PIP_DISABLE_PIP_VERSION_CHECK=1 \\",
        f"    VIRTUAL_ENV={VENV} \\",
        f"    PATH={VENV}/bin:$PATH",
        "",
        f"# Python {contents.python} from the base's Ubuntu, and the tools the job's shell steps call (ip, pkill, curl).",
        APT_PIN_NOTE,
        "RUN apt-get update \\",
        f" && apt-get install -y --no-install-recommends {python} {python}-venv {python}-dev \\",
        "    build-essential git curl ca-certificates iproute2 procps \\",
        " && rm -rf /var/lib/apt/lists/*",
        "# A virtual environment first on PATH: Ubuntu's own Python refuses pip installs (PEP 668).",
        f"RUN {python} -m venv {VENV}",
        "",
    ]
    if rdma_userspace(env):
        lines += [*_rdma(), ""]
    if contents.efa:
        lines += [*_efa(), ""]
    lines += [*_python_set(env), ""]
    if contents.nccl_tests:
        lines += [*_nccl_tests(contents.efa, contents.python), ""]
    if contents.grpo_infra:
        src = f"{GRPO_DIR}/src"
        lines += [
            "# This project's gate modules (python3 -m grpo_infra.cli nccl verdict, the gloo gate): its wheel is",
            f"# built here from the checkout given as the named build context `{PROJECT_CONTEXT}`, and installed",
            "# --no-deps: Pulumi and its pins stay out of the image; what the gate imports is in the lock.",
            f"# `{PROJECT_CONTEXT}` is a build context, not a stage (docker build --build-context {PROJECT_CONTEXT}=DIR): DL3022.",
            "# hadolint ignore=DL3022",
            f"COPY --from={PROJECT_CONTEXT} pyproject.toml {src}/pyproject.toml",
            f"# The package itself, from the same `{PROJECT_CONTEXT}` build context (DL3022 as above).",
            "# hadolint ignore=DL3022",
            f"COPY --from={PROJECT_CONTEXT} grpo_infra {src}/grpo_infra",
            f"RUN pip install --no-cache-dir --no-deps --no-build-isolation {src} && rm -rf {src}",
            "",
        ]
    all_reduce_perf = "all_reduce_perf" if contents.nccl_tests else None
    check = " ".join([*guard_args(env, all_reduce_perf=all_reduce_perf, grpo_infra=contents.grpo_infra), "--at-build"])
    lines += [
        "# The runtime guard, run once here: the build fails unless the image holds what the stack declares.",
        f"COPY {GUARD_FILE} {GRPO_DIR}/{GUARD_FILE}",
        f"RUN python3 {GRPO_DIR}/{GUARD_FILE} {check}",
        "",
        'LABEL org.opencontainers.image.title="grpo-infra verl image" \\',
        f'      io.grpo-infra.ray="{contents.ray}" \\',
        f'      io.grpo-infra.verl="{contents.verl or "none"}" \\',
        f'      io.grpo-infra.min-driver="{min_driver(contents.cuda) or "none"}" \\',
        f'      io.grpo-infra.engine="{contents.engine.name + "==" + contents.engine.version if contents.engine else "none"}"',
    ]
    return "\n".join(lines) + "\n"


def render_files(env: Environment) -> dict[str, str]:
    """`image/Dockerfile`, the lock in its two install steps and `image/image_guard.py`; nothing for a
    prebuilt image. Without a committed lock the lock files are absent (`check` refuses the stack)."""
    if env.image.build is None:
        return {}
    from . import guard_program

    files = {f"{FOLDER}/Dockerfile": dockerfile(env), f"{FOLDER}/{GUARD_FILE}": guard_program()}
    lock = env.image.build.lock
    if lock is not None:
        wheels, source, after = split(lock)
        files[f"{FOLDER}/{LOCK_FILE}"] = wheels
        if ATTENTION_PACKAGE.get(env.image.contents.attention) == "flash-attn":
            files[f"{FOLDER}/{SOURCE_LOCK_FILE}"] = source
            if pins(after):
                files[f"{FOLDER}/{AFTER_LOCK_FILE}"] = after
    return files
