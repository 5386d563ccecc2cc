"""What each kind of string in a stack file may hold, checked once in the spec and not in each renderer.

Stack-file strings land in shell scripts, slurm.conf, Kubernetes YAML and Dockerfiles. A value that
carries a newline, a control character, a right-to-left override or an unbounded length either
changes the structure of the file it lands in or reads differently from what runs, so every string
field takes one of these types (docs/spec.md, "What a string may hold"). Renderers still quote for
their target; these types make a hostile value a refusal at `check` instead of a quoting question.
"""

from __future__ import annotations

import math
import re
import unicodedata
from typing import Annotated

import hostlist
from pydantic import AfterValidator, StringConstraints

# Unicode categories never accepted in a stack-file string: control characters (Cc: NUL, ESC, DEL,
# newline, tab), format characters (Cf: right-to-left overrides, zero-width spaces, BOMs), line and
# paragraph separators (Zl, Zp), surrogates and unassigned or private code points.
_HIDDEN_CATEGORIES = frozenset({"Cc", "Cf", "Zl", "Zp", "Cs", "Co", "Cn"})

# PATH_MAX on Linux, less the terminating NUL.
MAX_PATH = 4095
# A line for people (a description) or a name verl prints (project, experiment).
MAX_TEXT = 1024
MAX_DISPLAY_NAME = 128
# Docker's reference grammar bounds a repository path to 255 characters and a tag to 128.
MAX_IMAGE_REF = 255 + 1 + 128


def shown(text: str) -> str:
    """`text` with every hidden character escaped (`\\n`, `\\x1b`, `\\u202e`): safe to print on one line."""
    out = []
    for char in text:
        if unicodedata.category(char) in _HIDDEN_CATEGORIES:
            out.append(repr(char)[1:-1] if char in "\n\r\t" else _escape(char))
        else:
            out.append(char)
    return "".join(out)


def _escape(char: str) -> str:
    code = ord(char)
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}" if code < 0x10000 else f"\\U{code:08x}"


def hidden_character(text: str) -> str | None:
    """The first character of `text` that prints as nothing or moves the text around, escaped; None if none."""
    return next((_escape(c) for c in text if unicodedata.category(c) in _HIDDEN_CATEGORIES), None)


def visible(text: str) -> str:
    """`text`, or ValueError naming its first hidden character."""
    found = hidden_character(text)
    if found is not None:
        raise ValueError(f"contains the control or invisible character {found}; write plain text on one line")
    return text


def _not_blank(text: str) -> str:
    if not text.strip():
        raise ValueError("must not be blank")
    return text


# A DNS host name: labels of letters, digits and inner hyphens, dot-separated.
_HOST_NAME = re.compile(r"[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?(\.[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?)*")


def _strict_hostlist(text: str) -> str:
    """A hostlist Slurm reads as one token: names, ranges in brackets and commas, nothing else.

    python-hostlist splits on whitespace-free syntax only; `node[1-3] Prolog=x` or a second line would
    otherwise land in slurm.conf as settings of their own."""
    try:
        names = hostlist.expand_hostlist(text)
    except hostlist.BadHostlist as exc:
        raise ValueError(f"not a Slurm hostlist such as gpu[001-016] ({exc})") from None
    bad = next((n for n in names if not _HOST_NAME.fullmatch(n)), None)
    if bad is not None:
        raise ValueError(f"host name {bad!r} is not a DNS host name (letters, digits, `-`, `.`)")
    if len(names) != len(set(names)):
        raise ValueError("the hostlist names a host twice")
    return text


def _finite(number: float) -> float:
    if not math.isfinite(number):
        raise ValueError(f"must be a finite number, got {number}")
    return number


# One line for people: any printable text, nothing hidden, bounded.
FreeText = Annotated[str, StringConstraints(max_length=MAX_TEXT), AfterValidator(visible)]
# A name verl and its loggers show (trainer.project_name, experiment_name): printable, not blank, bounded.
DisplayName = Annotated[
    str,
    StringConstraints(min_length=1, max_length=MAX_DISPLAY_NAME),
    AfterValidator(visible),
    AfterValidator(_not_blank),
]
# An absolute POSIX path: starts with /, no whitespace, nothing hidden, at most PATH_MAX.
AbsolutePath = Annotated[str, StringConstraints(pattern=r"^/\S*$", max_length=MAX_PATH), AfterValidator(visible)]
# A path or a location a tool resolves (a Hugging Face model id, a local path, an hf:// URL): one token.
Location = Annotated[
    str, StringConstraints(pattern=r"^\S+$", min_length=1, max_length=MAX_PATH), AfterValidator(visible)
]
# A value of an environment variable or a verl override: printable, one line, bounded.
Value = Annotated[str, StringConstraints(max_length=MAX_PATH), AfterValidator(visible)]
# A Slurm hostlist (`gpu[001-016]`, `a,b`): one token of host names and bracketed ranges.
Hostlist = Annotated[
    str,
    StringConstraints(pattern=r"^[A-Za-z0-9.\-\[\],]+$", min_length=1, max_length=MAX_TEXT),
    AfterValidator(_strict_hostlist),
]
# A float that is a number: no inf, no nan.
FiniteFloat = Annotated[float, AfterValidator(_finite)]
