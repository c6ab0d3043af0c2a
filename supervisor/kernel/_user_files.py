"""The user-level files subvisor trusts, kept out of reach where they resolve into a writable root.

subvisor trusts some files more than a project's because the user put them
there: the user profile dirs (a profile there may ask for ``sandbox: full``),
its config and trust store, user plugin dirs. Such a path may resolve into
a worker's writable root: ``~/.claude`` a link into a dotfiles repository the
user runs subvisor in, a project at ``~`` itself. There a workspace-write
worker could plant a user profile every later run loads, in any project
(S-SEC-3, S-SBX-3). So, as for ``.git``, the worker's mount namespace keeps
them read-only (``protect_below``):

- what the path resolves to, bound read-only, where it lies in a root;
- each symlink followed on the way that lies in a root (a worker could
  point it elsewhere): its directory bound read-only; one directly in a root
  cannot be, and the spawn is refused;
- each directory between a root and what is bound, pinned (bound over
  itself), so that renaming it cannot carry the bind away;
- a path that is missing where a root would hold it: its first missing
  component made an empty read-only placeholder, as ``ROOT/.git`` is.

Resolved on every spawn, never cached: a worker may have changed a link
since. Where no mount namespace can be made, Landlock leaves the same paths
out of every grant (the ``.git`` fallback).
"""

from __future__ import annotations

import os
import stat
from collections.abc import Iterable
from dataclasses import dataclass

from ._own_code import _within

__all__ = ["UserFileProtection", "protect_below"]

#: Symlinks followed at most while resolving one path (the kernel's own limit).
_MAX_LINKS = 40


@dataclass(frozen=True)
class UserFileProtection:
    """What a worker with some writable roots must be kept from changing."""

    read_only: tuple[str, ...] = ()
    pinned: tuple[str, ...] = ()
    uncreatable: tuple[str, ...] = ()
    #: A path that cannot be protected (a symlink directly in a writable root).
    refused: str | None = None


@dataclass
class _Resolution:
    target: str | None
    """The resolved path, or None where a component is missing."""
    missing: str | None
    """The first missing component (its parent resolved), where one is."""
    links: list[str]
    """Each symlink followed, where it sits (its parent resolved)."""


def _resolve(path: str) -> _Resolution:
    """Resolve ``path`` (absolute) as the kernel would, noting each symlink followed."""
    links: list[str] = []
    pending = [part for part in reversed(path.split("/")) if part]
    current = "/"
    while pending:
        name = pending.pop()
        if name == ".":
            continue
        if name == "..":
            current = os.path.dirname(current)
            continue
        candidate = os.path.join(current, name)
        try:
            mode = os.lstat(candidate).st_mode
        except FileNotFoundError:
            return _Resolution(None, candidate, links)
        except OSError:
            return _Resolution(None, None, links)
        if not stat.S_ISLNK(mode):
            current = candidate
            continue
        links.append(candidate)
        if len(links) > _MAX_LINKS:
            return _Resolution(None, None, links)
        try:
            target = os.readlink(candidate)
        except OSError:
            return _Resolution(None, None, links)
        if target.startswith("/"):
            current = "/"
        pending.extend(part for part in reversed(target.split("/")) if part)
    return _Resolution(current, None, links)


def _root_of(path: str, roots: list[str]) -> str | None:
    """The root ``path`` lies in (or is), if any."""
    return next((root for root in roots if _within(path, root)), None)


def _between(root: str, path: str) -> list[str]:
    """The directories strictly between ``root`` and ``path``, outermost first."""
    parts = os.path.relpath(path, root).split("/")[:-1]
    return [os.path.join(root, *parts[: i + 1]) for i in range(len(parts))]


def protect_below(
    paths: Iterable[str], roots: Iterable[str], hidden: Iterable[str] = ()
) -> UserFileProtection:
    """For user-level ``paths``, what to keep read-only, pinned or uncreatable in ``roots``.

    Nothing inside a ``hidden`` path (resolved): no worker reaches it at all.
    """
    resolved_roots = [os.path.realpath(root) for root in roots]
    out_of_reach = list(hidden)
    read_only: list[str] = []
    uncreatable: list[str] = []
    pinned: list[str] = []

    def guard(place: str, into: list[str]) -> str | None:
        root = _root_of(place, resolved_roots)
        if root is None or any(_within(place, h) for h in out_of_reach):
            return None
        if place == root:
            return place
        into.append(place)
        pinned.extend(_between(root, place))
        return None

    for path in paths:
        found = _resolve(os.path.abspath(path))
        for link in found.links:
            parent = os.path.dirname(link)
            if guard(parent, read_only) is not None:
                return UserFileProtection(refused=link)
        if found.target is not None:
            target = found.target
            if any(_within(target, h) for h in out_of_reach):
                continue
            # A root inside it: the worker writes into the user's dir itself.
            inside = [r for r in resolved_roots if r != target and _within(r, target)]
            if inside or guard(target, read_only) is not None:
                return UserFileProtection(refused=target)
        elif found.missing is not None:
            guard(found.missing, uncreatable)
    return UserFileProtection(
        read_only=tuple(dict.fromkeys(read_only)),
        pinned=tuple(dict.fromkeys(pinned)),
        uncreatable=tuple(dict.fromkeys(uncreatable)),
    )
