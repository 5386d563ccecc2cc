"""The operators' images and charts: each chart runs the binary it was released with.

The images are made from the binaries of scripts/build-kube.sh (skipped without them on a developer's
machine, failed under CI) and run with runc from the bundle umoci unpacks, as a node's containerd
would run them; the charts are the project's bundled copies (grpo_infra/k8s/charts/).
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import tarfile
from pathlib import Path

import pytest
import yaml

from grpo_infra.image import oci
from grpo_infra.k8s import operators
from grpo_infra.kube import operator_images, versions
from grpo_infra.spec import load_stack
from tests.conftest import unavailable

ROOT = Path(__file__).resolve().parents[2]
# The operators' binaries come from scripts/build-kube.sh: the suite runs this after the build.
pytestmark = pytest.mark.cluster


def _images() -> list[operator_images.OperatorImage]:
    images = operator_images.operator_images()
    missing = [str(i.binary) for i in images if not i.binary.is_file()]
    if missing:
        unavailable(f"operator binaries not built ({' '.join(missing)}): run scripts/build-kube.sh")
    if shutil.which("umoci") is None or shutil.which("runc") is None:
        unavailable("umoci/runc missing: run scripts/install-system-deps.sh")
    return images


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> list[tuple[operator_images.OperatorImage, Path]]:
    images = _images()
    return [(image, operator_images.ensure(image)) for image in images]


def _chart(name: str) -> tarfile.TarFile:
    return tarfile.open(operators.BUNDLED_CHARTS / name)


def _chart_text(chart: str, member: str) -> str:
    with _chart(chart) as tar:
        handle = tar.extractfile(member)
        assert handle is not None
        return handle.read().decode()


_HELP: dict[Path, str] = {}


def _help(image: operator_images.OperatorImage, archive: Path) -> str:
    """`/manager --help` run in a container of the archive (once per archive: each run unpacks it)."""
    if archive not in _HELP:
        code, out = oci.run_in_container(archive, image.ref, ["/manager", "--help"])
        assert code == 0, out[-2000:]
        _HELP[archive] = out
    return _HELP[archive]


def test_images_carry_the_references_the_rendered_releases_run(built) -> None:
    """What the nodes import is tagged exactly as the charts' values name the operator images."""
    env = load_stack("local-k8s", ROOT).environment
    kuberay = operators.kuberay_release(env)["values"]["image"]
    kueue = operators.kueue_release(env)["values"]["controllerManager"]["manager"]["image"]
    expected = {f"{kuberay['repository']}:{kuberay['tag']}", f"{kueue['repository']}:{kueue['tag']}"}
    assert {oci.archive_reference(archive) for _, archive in built} == expected


def test_local_cluster_runs_the_production_pins() -> None:
    """No skew: the binaries built here are the versions the production releases install."""
    assert f"v{operators.KUBERAY_VERSION}" == versions.KUBERAY
    assert f"v{operators.KUEUE_VERSION}" == versions.KUEUE


@pytest.mark.parametrize("which", [0, 1], ids=["kueue", "kuberay"])
def test_operator_starts_as_the_charts_non_root_user(built, which: int) -> None:
    """runAsNonRoot pods need a numeric non-root user in the image; the binary starts under it (its
    loader and libc are in the image) and answers --help."""
    image, archive = built[which]
    with tarfile.open(archive) as tar:
        index = json.load(tar.extractfile("index.json"))  # type: ignore[arg-type]
        manifest = json.load(tar.extractfile(f"blobs/sha256/{index['manifests'][0]['digest'][7:]}"))  # type: ignore[arg-type]
        config = json.load(tar.extractfile(f"blobs/sha256/{manifest['config']['digest'][7:]}"))  # type: ignore[arg-type]
    assert config["config"]["User"] == "65532:65532"
    assert config["config"]["Entrypoint"] == ["/manager"]
    assert re.search(r"^\s+--?config\b", _help(image, archive), re.MULTILINE)


def _template_flags(text: str) -> set[str]:
    """Every `--flag` a chart template can pass to the manager (literal flags in the template text)."""
    return set(re.findall(r"[\"'\s-]--([a-z][a-z0-9-]+)", text))


def test_every_flag_the_charts_pass_is_one_the_binary_knows(built) -> None:
    """A chart from another release could pass a flag the binary refuses at start (CrashLoopBackOff)."""
    kueue_image, kueue_archive = built[0]
    kuberay_image, kuberay_archive = built[1]
    kueue_flags = _template_flags(
        _chart_text(f"kueue-{operators.KUEUE_VERSION}.tgz", "kueue/templates/manager/manager.yaml")
        + _chart_text(f"kueue-{operators.KUEUE_VERSION}.tgz", "kueue/templates/_helpers.tpl")
    )
    kuberay_flags = _template_flags(
        _chart_text(f"kuberay-operator-{operators.KUBERAY_VERSION}.tgz", "kuberay-operator/templates/deployment.yaml")
    )
    # The chart's own list literals: append $argList "--flag".
    kuberay_flags |= set(
        re.findall(
            r'append \$argList "--([a-z0-9-]+)',
            _chart_text(
                f"kuberay-operator-{operators.KUBERAY_VERSION}.tgz", "kuberay-operator/templates/deployment.yaml"
            ),
        )
    )
    assert {"config", "zap-log-level"} <= kueue_flags
    assert {"batch-scheduler", "enable-batch-scheduler"} <= kuberay_flags
    for flags, image, archive in (
        (kueue_flags, kueue_image, kueue_archive),
        (kuberay_flags, kuberay_image, kuberay_archive),
    ):
        known = set(re.findall(r"^\s+--?([a-z][a-z0-9.-]+)", _help(image, archive), re.MULTILINE))
        assert flags - known == set(), image.ref


def _crd_core(text: str) -> dict:
    """A CRD's names, scope and versions (schemas included), template lines of a chart dropped."""
    text = re.sub(r"\{\{-? */\*.*?\*/ *-?\}\}", "", text, flags=re.S)
    plain = "\n".join(ln for ln in text.splitlines() if "{{" not in ln)
    doc = yaml.safe_load(plain)
    return {k: doc["spec"][k] for k in ("group", "names", "scope", "versions")}


def test_bundled_charts_install_the_crds_their_binaries_serve() -> None:
    """The CRDs each chart installs are those of the binary's own module at the same tag."""
    data = {
        f"kuberay-operator-{operators.KUBERAY_VERSION}.tgz": (
            "kuberay-operator/crds/",
            versions.cache_root() / f"ray-operator-{versions.KUBERAY}" / "data/config/crd/bases",
        ),
        f"kueue-{operators.KUEUE_VERSION}.tgz": (
            "kueue/templates/crd/",
            versions.cache_root() / f"kueue-{versions.KUEUE}" / "data/config/components/crd/bases",
        ),
    }
    for chart, (prefix, module_dir) in data.items():
        if not module_dir.is_dir():
            unavailable(f"{module_dir} missing: run scripts/build-kube.sh")
        with _chart(chart) as tar:
            members = {Path(m.name).name: m for m in tar.getmembers() if m.name.startswith(prefix) and m.isfile()}
            assert sorted(members) == sorted(p.name for p in module_dir.glob("*.yaml")), chart
            for name, member in members.items():
                handle = tar.extractfile(member)
                assert handle is not None
                assert _crd_core(handle.read().decode()) == _crd_core((module_dir / name).read_text()), name


def test_bundled_charts_are_the_recorded_files(tmp_path, monkeypatch) -> None:
    """A changed or missing chart copy is refused, not installed."""
    for name in operators.BUNDLED_SHA256:
        assert operators.bundled_chart(name).endswith(name)
    copy = tmp_path / "charts"
    shutil.copytree(operators.BUNDLED_CHARTS, copy)
    name = f"kuberay-operator-{operators.KUBERAY_VERSION}.tgz"
    (copy / name).write_bytes((copy / name).read_bytes() + b"\0")
    monkeypatch.setattr(operators, "BUNDLED_CHARTS", copy)
    with pytest.raises(ValueError, match="not the recorded chart"):
        operators.bundled_chart(name)


def test_chart_versions_are_the_pins() -> None:
    """Chart.yaml of each bundled copy states the pinned version (and the image tag its values default to)."""
    kuberay = yaml.safe_load(
        _chart_text(f"kuberay-operator-{operators.KUBERAY_VERSION}.tgz", "kuberay-operator/Chart.yaml")
    )
    assert kuberay["version"] == operators.KUBERAY_VERSION
    values = yaml.safe_load(
        _chart_text(f"kuberay-operator-{operators.KUBERAY_VERSION}.tgz", "kuberay-operator/values.yaml")
    )
    assert values["image"]["tag"] == f"v{operators.KUBERAY_VERSION}"
    kueue = yaml.safe_load(_chart_text(f"kueue-{operators.KUEUE_VERSION}.tgz", "kueue/Chart.yaml"))
    assert (kueue["version"], kueue["appVersion"]) == (operators.KUEUE_VERSION, f"v{operators.KUEUE_VERSION}")


def test_local_stack_installs_from_bundled_charts_and_cloud_stacks_from_upstream() -> None:
    local = load_stack("local-k8s", ROOT).environment
    for release in operators.helm_releases(local):
        assert Path(operators.chart_path(release["chart"])).is_file() and release["repository"] is None
    eks = load_stack("eks-prod", ROOT).environment
    charts = [r["chart"] for r in operators.helm_releases(eks)]
    assert charts == [operators.KUBERAY_CHART, operators.KUEUE_CHART]


def test_umoci_reads_the_archive_layout(built, tmp_path) -> None:
    """The archive is a valid OCI layout to the reference tool too (skopeo lists its one image)."""
    if shutil.which("skopeo") is None:
        unavailable("skopeo missing: run scripts/install-system-deps.sh")
    for image, archive in built:
        out = subprocess.run(
            ["skopeo", "inspect", "--raw", f"oci-archive:{archive}:{image.ref}"], capture_output=True, text=True
        )
        assert out.returncode == 0, out.stderr
        assert json.loads(out.stdout)["layers"][0]["mediaType"] == oci.MEDIA_LAYER
