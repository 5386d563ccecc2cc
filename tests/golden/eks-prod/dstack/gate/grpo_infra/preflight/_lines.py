"""Undo what launchers, log collectors and pastes do to output lines, so parsers see what the program printed.

Every form below was met in real output (tests/preflight/data/real/index.yaml names where):

* Open MPI ``--tag-output``: ``[1,0]<stdout>:``, also indented when quoted;
* ``srun --label``: `` 0: ``; pdsh/clush: ``node-a01: ``;
* torchrun ``--tee``/``--log-prefix``-style rank tags: ``[0] ``, ``[default0]:``, ``[rank3]:``; Ray's
  worker prefix ``(RayWorkerWrapper pid=1000) ``;
* ``kubectl logs --prefix``: ``[pod/NAME/CONTAINER] ``; ``kubectl logs --timestamps`` and journald ISO
  timestamps, with or without a zone, glued to the text or followed by blanks;
* CloudWatch Logs exports: ``  | 2025-05-16T16:39:51.208-07:00 | text | text again``;
* ANSI colour codes; Markdown quotes (``> ``); CR line ends and trailing blanks.
"""

from __future__ import annotations

import re

_ANSI = re.compile(r"\x1b\[[0-9;?]*[ -/]*[@-~]")
_ISO = r"\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}:\d{2}(?:[.,]\d+)?"
# A CloudWatch export's first column; the message is then repeated after ` | `.
_CLOUDWATCH = re.compile(r"^\s*\|\s*(?=" + _ISO + ")")

# Launchers and log collectors put their own tag in front of every line. Each pattern removes one
# layer; they are tried repeatedly because layers stack (pdsh around mpirun, a timestamp around both).
_PREFIXES: tuple[re.Pattern[str], ...] = (
    # Open MPI --tag-output: "[1,0]<stdout>:"
    re.compile(r"^\s*\[\d+,\d+\]<(?:stdout|stderr)>:\s?"),
    # kubectl logs --prefix: "[pod/name/container] "
    re.compile(r"^\[pod/[^\]\s]+\]\s?"),
    # Ray's worker log prefix: "(RayWorkerWrapper pid=1000) ", "(raylet, ip=10.0.0.1) "
    re.compile(r"^\([\w.-]+(?:,? (?:pid|ip)=[\w.:-]+)+\)\s"),
    # rank tags of torchrun and friends: "[0] ", "[default0]:", "[rank3]: "
    re.compile(r"^\[(?:default|rank)\d+\]:\s?|^\[\d+\]\s"),
    # ISO timestamps with a zone: may be glued to the text ("...-07:00ip-10-0-0-1:..."), or a " | " column
    re.compile(r"^" + _ISO + r"(?:Z|[+-]\d{2}:?\d{2})(?:\s*\|\s*|\s*)"),
    # ISO timestamps without a zone: followed by blanks
    re.compile(r"^" + _ISO + r"\s+"),
    # the same in brackets, as a job's logger stamps lines: "[2025-10-16 22:16:08] " (aws/aws-ofi-nccl#1020)
    re.compile(r"^\[" + _ISO + r"\]\s+"),
    # srun --label: "3: "
    re.compile(r"^\s*\d+:\s"),
    # pdsh / clush / "srun ... | sed 's/^/host: /'": "node-a01: "
    re.compile(r"^[A-Za-z0-9][\w.\-]*:\s"),
    # Markdown quotes in pasted issues: "> "
    re.compile(r"^>\s?"),
)


def clean_line(line: str) -> str:
    """Return the line as the program printed it, without launcher tags, colours, CR or trailing blanks."""
    line = _ANSI.sub("", line.rstrip("\r\n")).rstrip()
    cloudwatch = bool(_CLOUDWATCH.match(line))
    if cloudwatch:
        line = _CLOUDWATCH.sub("", line, count=1)
    for _ in range(6):
        before = line
        for pattern in _PREFIXES:
            line = pattern.sub("", line, count=1)
        if line == before:
            break
    if cloudwatch:
        line = line.split(" | ", 1)[0].rstrip()
    return line


def clean_lines(text: str) -> list[str]:
    """Split text into cleaned lines."""
    return [clean_line(raw) for raw in text.splitlines()]
