"""docs/spec.md lists every field of the spec exactly as the models define it."""

from __future__ import annotations

from grpo_infra.spec.reference import BEGIN, END, markdown, rows
from tests.conftest import ROOT


def test_docs_field_table_matches_the_models() -> None:
    doc = (ROOT / "docs" / "spec.md").read_text()
    embedded = doc[doc.index(BEGIN) : doc.index(END) + len(END)]
    assert embedded == markdown(), "docs/spec.md is stale: regenerate with python -m grpo_infra.spec.reference"


def test_reference_reaches_nested_fields() -> None:
    paths = {p for p, *_ in rows()}
    assert {"pools[].gpu.perNode", "job.batch.microPerGpu", "slurm.rayPorts.start", "tenants[].gpuQuota"} <= paths
