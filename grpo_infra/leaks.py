"""Does a text carry a secret value, plainly or in the encodings a manifest or a program gives it?

A secret leaks not only as itself: a Kubernetes Secret's `data` or a cloud-init script holds it in
base64, a JSON string escapes it (Go's encoder writes `<` as `\\u003c`), a URL percent-encodes it.
"""

from __future__ import annotations

import base64
import json
from urllib.parse import quote


def _base64_fragments(secret: bytes) -> set[str]:
    """The base64 characters that encode `secret` wherever it starts in a longer value.

    Each base64 character stands for 6 bits; where the secret starts (its offset modulo 3 bytes) decides
    which characters' bits come from the secret alone. For each offset, keep exactly those characters.
    """
    out = set()
    for offset in range(3):
        padded = b"\0" * offset + secret + b"\0" * 3
        encoded = base64.b64encode(padded[: len(padded) // 3 * 3]).decode()
        low, high = 8 * offset, 8 * (offset + len(secret))
        fragment = "".join(c for i, c in enumerate(encoded) if low <= 6 * i and 6 * i + 6 <= high)
        if len(fragment) >= 4:
            out |= {fragment, fragment.replace("+", "-").replace("/", "_")}
    return out


def encodings(secret: str) -> set[str]:
    """The forms of `secret` to look for: itself, JSON-escaped, percent-encoded, base64 at any offset."""
    forms = {secret, json.dumps(secret)[1:-1], json.dumps(secret, ensure_ascii=True)[1:-1], quote(secret, safe="")}
    forms.add(json.dumps(secret)[1:-1].replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026"))
    forms |= _base64_fragments(secret.encode())
    return {f for f in forms if f}


def carries(text: str, secret: str) -> bool:
    """True when `text` holds `secret` in any of its `encodings`."""
    return any(form in text for form in encodings(secret))
