"""Shared building blocks of the environment spec.

Every model is closed (`extra="forbid"`): a misspelled key in a stack file is an error, never a
silently ignored setting. Keys are camelCase in YAML, as Pulumi config keys are.
"""

from __future__ import annotations

from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field, StringConstraints
from pydantic.alias_generators import to_camel


class SpecModel(BaseModel):
    """Base of every spec model: closed, immutable, camelCase in YAML."""

    model_config = ConfigDict(
        extra="forbid",
        frozen=True,
        alias_generator=to_camel,
        populate_by_name=False,
        strict=False,
        validate_default=True,
        # A docstring under a field is its description: docs/spec.md is generated from them.
        use_attribute_docstrings=True,
        # inf and nan are no setting anyone means: a NaN bandwidth passes every comparison, inf overflows.
        allow_inf_nan=False,
    )


# A DNS-1123 label: what Kubernetes accepts for namespaces, label values used as names, and
# what Slurm accepts without quoting for partition, account and node names.
DnsLabel = Annotated[
    str,
    StringConstraints(pattern=r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$", max_length=63),
]

# A Kubernetes resource name such as `nvidia.com/gpu` or `rdma/ib`.
ResourceName = Annotated[
    str,
    StringConstraints(pattern=r"^([a-z0-9]([-a-z0-9.]*[a-z0-9])?/)?[a-zA-Z0-9]([-a-zA-Z0-9_.]*[a-zA-Z0-9])?$"),
]

# A POSIX environment variable name.
EnvName = Annotated[str, StringConstraints(pattern=r"^[A-Za-z_][A-Za-z0-9_]*$")]

PositiveInt = Annotated[int, Field(ge=1)]
