"""Keeping this process's environment as a test found it."""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager

__all__ = ["environ_restored"]

#: pytest's own variable: it sets and removes it around each phase of a test.
_PYTEST_CURRENT_TEST = "PYTEST_CURRENT_TEST"


@contextmanager
def environ_restored() -> Iterator[None]:
    """On leaving, undo what was set in or removed from ``os.environ`` inside."""
    before = dict(os.environ)
    try:
        yield
    finally:
        for key in os.environ.keys() - before.keys() - {_PYTEST_CURRENT_TEST}:
            del os.environ[key]
        for key, value in before.items():
            if key != _PYTEST_CURRENT_TEST and os.environ.get(key) != value:
                os.environ[key] = value
