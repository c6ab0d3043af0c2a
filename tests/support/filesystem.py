"""Filesystem facts tests check: ext4's top-directory flag."""

from __future__ import annotations

from pathlib import Path

from supervisor.files._ext4_topdir import is_top_directory, mark_top_directory

__all__ = ["can_mark_top_directories", "is_top_directory"]


def can_mark_top_directories(scratch: Path) -> bool:
    """Whether the filesystem of ``scratch`` (a dir) keeps the top-directory flag."""
    probe = scratch / "top-directory-probe"
    probe.mkdir()
    try:
        return mark_top_directory(probe) and is_top_directory(probe)
    finally:
        probe.rmdir()
