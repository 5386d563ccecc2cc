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
from .verl_releases import RELEASES

FOLDER = "image"
EFA_INSTALLER_VERSION = "1.40.0"
AWS_OFI_NCCL_VERSION = "1.14.2"
NCCL_TESTS_VERSION = "2.19.6"
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


def wheel_name() -> str:
    """The wheel `pip wheel --no-deps .` builds from this project (docs/images.md)."""
    from importlib.metadata import version

    return f"grpo_infra-{version('grpo-infra')}-py3-none-any.whl"


def requirements(image: Image) -> str:
    """The pinned Python packages: verl with its engine extra, the engine, Ray, torch as verl pins it."""
    contents = image.contents
    lines = ["# Rendered by grpo-infra from the stack's image.contents; edit the stack, not this file."]
    if contents.verl is not None:
        extra = f"[{contents.engine.name}]" if contents.engine is not None else ""
        lines.append(f"verl{extra}=={contents.verl}")
    if contents.engine is not None:
        lines.append(f"{contents.engine.name}=={contents.engine.version}")
    lines.append(f"ray[default]=={contents.ray}")
    release = RELEASES.get(contents.verl or "")
    if release is not None and release.torch is not None and release.torch.startswith("=="):
        lines.append(f"torch{release.torch}")
    return "\n".join(lines) + "\n"


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
        f"ARG AWS_OFI_NCCL_VERSION={AWS_OFI_NCCL_VERSION}",
        "# One layer: the sources are built and removed where they were unpacked (DL3003); apt as above (DL3008).",
        "# hadolint ignore=DL3003,DL3008",
        "RUN apt-get update \\",
        " && apt-get install -y --no-install-recommends autoconf automake libtool libhwloc-dev \\",
        ' && curl -fsSL "https://efa-installer.amazonaws.com/aws-efa-installer-${EFA_INSTALLER_VERSION}.tar.gz" \\',
        "    | tar -xz -C /tmp \\",
        " && cd /tmp/aws-efa-installer && ./efa_installer.sh -y -g --skip-kmod --skip-limit-conf --no-verify \\",
        ' && curl -fsSL "https://github.com/aws/aws-ofi-nccl/archive/refs/tags/v${AWS_OFI_NCCL_VERSION}.tar.gz" \\',
        "    | tar -xz -C /tmp \\",
        ' && cd "/tmp/aws-ofi-nccl-${AWS_OFI_NCCL_VERSION}" && ./autogen.sh \\',
        " && ./configure --prefix=/opt/amazon/ofi-nccl --with-libfabric=/opt/amazon/efa --with-cuda=/usr/local/cuda \\",
        "    --with-mpi=/opt/amazon/openmpi --enable-platform-aws \\",
        ' && make -j"$(nproc)" install \\',
        " && printf '%s\\n' /opt/amazon/ofi-nccl/lib /opt/amazon/efa/lib /opt/amazon/openmpi/lib > /etc/ld.so.conf.d/efa.conf \\",
        " && ldconfig \\",
        ' && rm -rf /tmp/aws-efa-installer "/tmp/aws-ofi-nccl-${AWS_OFI_NCCL_VERSION}" /var/lib/apt/lists/*',
        "ENV PATH=/opt/amazon/openmpi/bin:/opt/amazon/efa/bin:$PATH",
    ]


def _nccl_tests(efa: bool) -> list[str]:
    mpi = "/opt/amazon/openmpi" if efa else "/usr/lib/x86_64-linux-gnu/openmpi"
    mpi_packages = "" if efa else " libopenmpi-dev openmpi-bin"
    return [
        "# nccl-tests with MPI: Slurm's fabric gate runs all_reduce_perf as one rank per GPU under srun --mpi.",
        f"ARG NCCL_TESTS_VERSION={NCCL_TESTS_VERSION}",
        APT_PIN_NOTE,
        "RUN apt-get update \\",
        f" && apt-get install -y --no-install-recommends libnccl2 libnccl-dev{mpi_packages} \\",
        ' && git clone --depth 1 --branch "v${NCCL_TESTS_VERSION}" https://github.com/NVIDIA/nccl-tests.git /tmp/nccl-tests \\',
        f' && make -C /tmp/nccl-tests -j"$(nproc)" MPI=1 MPI_HOME={mpi} CUDA_HOME=/usr/local/cuda \\',
        " && install -m 0755 /tmp/nccl-tests/build/all_reduce_perf /usr/local/bin/all_reduce_perf \\",
        " && rm -rf /tmp/nccl-tests /var/lib/apt/lists/*",
    ]


def dockerfile(env: Environment) -> str:
    """The Dockerfile of the stack's image build (`image.build`)."""
    image = env.image
    contents = image.contents
    python = f"python{contents.python}"
    lines = [
        "# Rendered by grpo-infra from the stack's `image` block; edit the stack and re-run `grpo-infra synth`.",
        f"# Holds: {_summary(env)}.",
        f"# Build from this folder and push to {image.ref} (docs/images.md).",
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
    if contents.efa:
        lines += [*_efa(), ""]
    if contents.nccl_tests:
        lines += [*_nccl_tests(contents.efa), ""]
    lines += [
        "# verl with the engine its wheel pairs with, and Ray at exactly the stack's release (requirements.txt).",
        f"COPY requirements.txt {GRPO_DIR}/requirements.txt",
        f"RUN pip install --no-cache-dir -r {GRPO_DIR}/requirements.txt",
        "",
    ]
    if contents.grpo_infra:
        wheel = wheel_name()
        lines += [
            "# This project's gate modules (python3 -m grpo_infra.cli nccl verdict, the gloo gate): a wheel built",
            "# into this folder with `pip wheel --no-deps -w DIR/STACK/image .` (docs/images.md).",
            f"COPY {wheel} {GRPO_DIR}/",
            f"RUN pip install --no-cache-dir {GRPO_DIR}/{wheel} && rm {GRPO_DIR}/{wheel}",
            "",
        ]
    all_reduce_perf = "all_reduce_perf" if contents.nccl_tests else None
    check = " ".join(guard_args(env, all_reduce_perf=all_reduce_perf, grpo_infra=contents.grpo_infra))
    lines += [
        "# The runtime guard, run once here: the build fails unless the image holds what the stack declares.",
        f"COPY {GUARD_FILE} {GRPO_DIR}/{GUARD_FILE}",
        f"RUN python3 {GRPO_DIR}/{GUARD_FILE} {check}",
        "",
        'LABEL org.opencontainers.image.title="grpo-infra verl image" \\',
        f'      io.grpo-infra.ray="{contents.ray}" \\',
        f'      io.grpo-infra.verl="{contents.verl or "none"}" \\',
        f'      io.grpo-infra.engine="{contents.engine.name + "==" + contents.engine.version if contents.engine else "none"}"',
    ]
    return "\n".join(lines) + "\n"


def render_files(env: Environment) -> dict[str, str]:
    """`image/Dockerfile`, `image/requirements.txt` and `image/image_guard.py`; nothing for a prebuilt image."""
    if env.image.build is None:
        return {}
    from . import guard_program

    return {
        f"{FOLDER}/Dockerfile": dockerfile(env),
        f"{FOLDER}/requirements.txt": requirements(env.image),
        f"{FOLDER}/{GUARD_FILE}": guard_program(),
    }
