"""Pieces of a rendered script to run in bash: its shell functions by name."""

from __future__ import annotations

import re


def function(script: str, name: str) -> str:
    """The text of one shell function of `script`: a one-line `name() { ...; }` or `name() {` to its closing `}`."""
    match = re.search(rf"^{name}\(\) \{{( [^\n]*\}}$|\n.*?^\}}$)", script, re.M | re.S)
    assert match, f"no function {name} in the script"
    return match.group(0) + "\n"


def functions(script: str, *names: str) -> str:
    """Several functions of `script`, in the given order."""
    return "".join(function(script, name) for name in names)
