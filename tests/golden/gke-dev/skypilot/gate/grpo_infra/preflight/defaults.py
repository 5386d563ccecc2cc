"""The fabric gate's defaults: what a stack gets when it says nothing about its preflight.

Plain values with no imports of the project, so the spec (the bottom layer) can take its defaults
from here without reaching up into the gate's code, and the gate running inside the image needs
nothing but this file to agree with the spec.
"""

from __future__ import annotations

FABRIC_KINDS: tuple[str, ...] = ("infiniband", "roce", "efa", "none")
# The share of the fabric's expected bus bandwidth a healthy all-reduce reaches (docs/nccl-preflight.md).
DEFAULT_FRACTION = 0.8
DEFAULT_BACKEND = "nccl"
DEFAULT_SIZE_MIB = 1024
DEFAULT_ITERATIONS = 20
DEFAULT_TIMEOUT_S = 300
