"""Undo what launchers and pastes do to output lines, so parsers see what the program printed."""

from __future__ import annotations

import re

# Launchers and log collectors put their own tag in front of every line. Each pattern removes one
# layer; they are tried repeatedly because layers stack (pdsh around mpirun, a timestamp around both).
_PREFIXES: tuple[re.Pattern[str], ...] = (
    # Open MPI --tag-output: "[1,0]<stdout>:"
    re.compile(r"^\[\d+,\d+\]<(?:stdout|stderr)>:\s?"),
    # kubectl logs --timestamps / journald-style ISO timestamps
    re.compile(r"^\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}:\d{2}(?:[.,]\d+)?(?:Z|[+-]\d{2}:?\d{2})?\s+"),
    # srun --label: "3: "
    re.compile(r"^\s*\d+:\s"),
    # pdsh / clush / "srun ... | sed 's/^/host: /'": "node-a01: "
    re.compile(r"^[A-Za-z0-9][\w.\-]*:\s"),
    # Markdown quotes in pasted issues: "> "
    re.compile(r"^>\s?"),
)


def clean_line(line: str) -> str:
    """Return the line as the program printed it, without launcher tags, CR or trailing blanks."""
    line = line.rstrip("\r\n").rstrip()
    for _ in range(4):
        before = line
        for pattern in _PREFIXES:
            line = pattern.sub("", line, count=1)
        if line == before:
            break
    return line


def clean_lines(text: str) -> list[str]:
    """Split text into cleaned lines."""
    return [clean_line(raw) for raw in text.splitlines()]
