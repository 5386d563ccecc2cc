"""`python -m tests.golden`: refresh the golden trees of every shipped stack (see `tests/golden/__init__.py`)."""

from tests.golden import refresh

refresh()
