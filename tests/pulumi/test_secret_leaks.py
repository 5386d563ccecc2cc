"""A secret read as plaintext is reported wherever it ends up, in whatever encoding it ends up in."""

from __future__ import annotations

import base64
import json

import pulumi
import pytest

from grpo_infra.leaks import carries
from grpo_infra.pulumi_graph import SECRET, record

from .conftest import ROOT

# How a plaintext secret typically reaches a resource: a Secret's `data`, a JSON blob, a URL, a script.
LEAKS = {
    "data": lambda v: base64.b64encode(v.encode()).decode(),
    "prefixed": lambda v: base64.b64encode(f"HF_TOKEN={v}\n".encode()).decode(),
    "shifted": lambda v: base64.b64encode(f"ab{v}".encode()).decode(),
    "urlsafe": lambda v: base64.urlsafe_b64encode(f"x{v}yz".encode()).decode(),
    "json": lambda v: json.dumps({"token": v}),
    "go-json": lambda v: json.dumps({"token": v}).replace("<", "\\u003c").replace(">", "\\u003e"),
    "url": lambda v: "https://hub.example/?token=" + v.replace("<", "%3C").replace(">", "%3E"),
}


@pytest.mark.parametrize("form", sorted(LEAKS))
def test_an_encoded_plaintext_secret_is_reported_and_masked(form: str) -> None:
    def program() -> None:
        leaked = pulumi.Config("grpo-infra").require("hfToken")  # read as plaintext: a leak
        pulumi.CustomResource("grpo-infra:test:Thing", "thing", {"blob": LEAKS[form](leaked), "fine": "ok"})

    graph = record("onprem-k8s", ROOT, program=program)
    thing = graph.named("grpo-infra:test:Thing", "thing")
    assert graph.plaintext_secrets == (f"{thing.urn} blob",)
    assert thing.inputs == {"blob": SECRET, "fine": "ok"}


def test_values_that_merely_resemble_a_secret_are_not_reported() -> None:
    """No false alarms on the words around a secret: its name, its key, base64 of other text."""
    for text in ("secret", "grpo-hf-token", "secretKeyRef", base64.b64encode(b"a secret value").decode(), "<secre"):
        assert not carries(text, "<secret>"), text
