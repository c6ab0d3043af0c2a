"""Finding every profile a session can use, and which one a name means (S-PROF-3, S-TOOL-2).

Precedence, lowest first (a later profile of the same name replaces an
earlier one, and the entry records what it replaced):

1. built-ins (S-PROF-1), then plugins (lowest of the files, as in Claude Code);
2. user dirs: ``~/.claude/agents`` (Claude Code), ``$XDG_CONFIG_HOME/opencode/agent``
   and ``.../agents`` (opencode), then ``$SUBVISOR_HOME/agents``;
3. project dirs under the project root: ``.claude/agents``, ``.opencode/agent``,
   ``.opencode/agents``, then ``.subvisor/agents``.

Dirs are scanned recursively for ``.md``/``.markdown`` files, skipping hidden
entries and the ``sess_*`` task output dirs that S-RUN-1 also keeps in
``$SUBVISOR_HOME/agents``. A Markdown file without frontmatter is not a
profile (a README): it is listed in ``ignored``, not as an error. Only the
project root itself is searched, not its parents.

Plugins (Claude Code's layout): a dir holding ``.claude-plugin/plugin.json``
with a ``name`` and optionally ``agents`` (paths relative to the plugin; they
add to its ``agents/`` dir, as in Claude Code). Their profiles are named
``<plugin>:<name>``; the bare ``<name>`` is an alias only when, after S-TOOL-2
normalisation, it is unique among all plugin profiles and equals no other
profile's name (built-in, user, project or plugin).

A file that fails to load never stops the others: it becomes an entry with
its error and takes no part in precedence, so a same-named profile of lower
precedence stays usable (its entry says what failed above it), and a request
for a name only a broken file has shows that file's error.

Invariant (S-SEC-1, S-SEC-3): a project dir, every dir below it and every
profile file in it is read only where it resolves inside the project root
and outside every subvisor home (``Confinement``), checked on the open
descriptor that is then read. A repository or a subagent writing in the
project can plant links, and the supervisor reads with the user's rights: a
link to another profile's memory in subvisor's home, or to another project,
would make that text a prompt. What is refused is skipped and said in
``ignored`` and the log, one line each. Links inside the project still work;
user dirs and plugins are the user's own choice and are followed anywhere.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from types import MappingProxyType
from typing import Any

from ..files._confined import Confinement, OutsideConfinementError
from ..files._input_files import read_regular_file
from ._builtin_profiles import BUILTIN_PROFILES
from ._names import (
    AmbiguousAgentTypeError,
    SubagentTypeError,
    UnknownAgentTypeError,
    normalize_agent_name,
    resolve_agent_name,
)
from ._profile import AgentProfile, ProfileScope
from ._profile_files import (
    NotAProfileError,
    ProfileDialect,
    ProfileError,
    RefusedProfileFileError,
    parse_profile_file,
)

__all__ = [
    "PLUGIN_MANIFEST",
    "PROFILE_SUFFIXES",
    "ProfileCatalog",
    "ProfileDir",
    "ProfileEntry",
    "ProfileUnavailableError",
    "project_profile_dirs",
    "user_profile_dirs",
]

#: Where a plugin keeps its manifest, relative to the plugin dir.
PLUGIN_MANIFEST = Path(".claude-plugin") / "plugin.json"
#: A plugin manifest larger than this is refused: it names a plugin, nothing more.
_MAX_MANIFEST_BYTES = 1 << 20
PROFILE_SUFFIXES: frozenset[str] = frozenset({".md", ".markdown"})
_TASK_OUTPUT_PREFIX = "sess_"
#: What to do about a project profile file or dir refused for where it resolves.
_REFUSED_HINT = (
    "a project's profiles must lie inside the project: copy the file into the project,"
    " or into ~/.claude/agents to use it in every project"
)

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class ProfileDir:
    """A dir scanned for profile files, with the scope and dialect of what it holds."""

    path: Path
    scope: ProfileScope
    dialect: ProfileDialect


def user_profile_dirs(
    home: Path, *, user_home: Path | None = None, config_home: Path | None = None
) -> tuple[ProfileDir, ...]:
    """The user-level profile dirs, lowest precedence first (S-PROF-3).

    ``home`` is ``$SUBVISOR_HOME``; ``user_home`` defaults to ``Path.home()``
    and ``config_home`` to ``$XDG_CONFIG_HOME`` or ``user_home/.config``.
    """
    user_home = user_home if user_home is not None else Path.home()
    if config_home is None:
        xdg = os.environ.get("XDG_CONFIG_HOME", "")
        config_home = Path(xdg) if xdg else user_home / ".config"
    return (
        ProfileDir(user_home / ".claude" / "agents", "user", "claude"),
        ProfileDir(config_home / "opencode" / "agent", "user", "opencode"),
        ProfileDir(config_home / "opencode" / "agents", "user", "opencode"),
        ProfileDir(home / "agents", "user", "subvisor"),
    )


def project_profile_dirs(project_dir: Path) -> tuple[ProfileDir, ...]:
    """The project-level profile dirs, lowest precedence first (S-PROF-3)."""
    return (
        ProfileDir(project_dir / ".claude" / "agents", "project", "claude"),
        ProfileDir(project_dir / ".opencode" / "agent", "project", "opencode"),
        ProfileDir(project_dir / ".opencode" / "agents", "project", "opencode"),
        ProfileDir(project_dir / ".subvisor" / "agents", "project", "subvisor"),
    )


@dataclass(frozen=True, slots=True)
class ProfileEntry:
    """One profile the catalog found: a built-in, a file, or a plugin manifest that failed.

    ``profile`` is None exactly when ``error`` is set. ``overrides`` are the
    sources this entry replaced; ``overridden_by`` the source that replaced
    it. ``not_launchable`` says why it cannot be launched, or is None.
    """

    name: str
    source: str
    scope: ProfileScope
    dialect: ProfileDialect | None = None
    plugin: str | None = None
    profile: AgentProfile | None = None
    error: ProfileError | None = None
    warnings: tuple[str, ...] = ()
    overrides: tuple[str, ...] = ()
    overridden_by: str | None = None
    aliases: tuple[str, ...] = ()

    @property
    def not_launchable(self) -> str | None:
        """Why this entry cannot be launched as a subagent, or None when it can."""
        if self.error is not None:
            return f"failed to load: {self.error}"
        if self.overridden_by is not None:
            return f"overridden by {self.overridden_by}"
        assert self.profile is not None
        if self.profile.disabled:
            return "disabled by 'disable: true'"
        if self.profile.mode == "primary":
            return (
                "opencode 'mode: primary': a primary agent talks to the user and is not a "
                "subagent; set mode to subagent or all to launch it"
            )
        return None

    @property
    def launchable(self) -> bool:
        return self.not_launchable is None

    def to_json(self) -> dict[str, Any]:
        """This entry as JSON-ready data, for ``subvisor agents --json``."""
        profile = self.profile
        data: dict[str, Any] = {
            "name": self.name,
            "aliases": list(self.aliases),
            "source": self.source,
            "scope": self.scope,
            "dialect": self.dialect,
            "plugin": self.plugin,
            "overrides": list(self.overrides),
            "overridden_by": self.overridden_by,
            "launchable": self.launchable,
            "not_launchable": self.not_launchable,
            "error": None
            if self.error is None
            else {"message": str(self.error), "line": self.error.line, "field": self.error.field},
            "warnings": list(self.warnings),
        }
        if profile is not None:
            data |= {
                "description": profile.description,
                "tools": None if profile.tools is None else list(profile.tools),
                "disallowed_tools": list(profile.disallowed_tools),
                "model": profile.model,
                "mode": profile.mode,
                "max_turns": profile.max_turns,
                "memory": profile.memory,
                "cpus": profile.cpus,
                "background": profile.background,
                "skills": list(profile.skills),
                "mcp_servers": list(profile.mcp_servers),
                "permission": profile.permission,
            }
        return data


class ProfileUnavailableError(SubagentTypeError):
    """The requested name means only profiles that cannot be launched (broken, primary, ...)."""

    def __init__(
        self, requested: str, entries: Sequence[ProfileEntry], available: Iterable[str]
    ) -> None:
        self.entries = tuple(entries)
        reasons = "; ".join(f"{entry.name} ({entry.not_launchable})" for entry in self.entries)
        names = sorted(set(available))
        listing = f" Available agent types: {', '.join(names)}." if names else ""
        super().__init__(
            f"subagent_type {requested!r} cannot be launched: {reasons}.{listing}", requested
        )


class ProfileCatalog:
    """Every profile found for one project, with precedence applied (S-PROF-3)."""

    def __init__(
        self, entries: Sequence[ProfileEntry], ignored: Mapping[str, str] | None = None
    ) -> None:
        self.entries: tuple[ProfileEntry, ...] = tuple(entries)
        #: Files that were not profiles (no frontmatter) or could not be scanned: path -> why.
        self.ignored: Mapping[str, str] = MappingProxyType(dict(ignored or {}))
        launchable = [e for e in self.entries if e.launchable and e.profile is not None]
        #: The launchable profiles by canonical name; what the Agent tool lists (S-TOOL-4).
        self.profiles: Mapping[str, AgentProfile] = MappingProxyType(
            {e.name: e.profile for e in launchable if e.profile is not None}
        )
        #: Bare plugin names that resolve to ``<plugin>:<name>`` (S-PROF-3).
        self.aliases: Mapping[str, str] = MappingProxyType(
            {alias: e.name for e in launchable for alias in e.aliases}
        )

    @classmethod
    def discover(
        cls,
        project_dir: Path,
        *,
        home: Path,
        user_dirs: Sequence[ProfileDir] | None = None,
        plugin_dirs: Sequence[Path] = (),
        builtins: Mapping[str, AgentProfile] = BUILTIN_PROFILES,
        hidden: Sequence[Path] | None = None,
    ) -> ProfileCatalog:
        """Scan built-ins, user dirs, project dirs and plugins (S-PROF-3).

        ``user_dirs`` defaults to :func:`user_profile_dirs` (``home``, the
        real user's home); tests pass their own. ``hidden`` are the dirs no
        project file may resolve into (every subvisor home the run hides from
        its workers; default ``home``): see the module's invariant.
        """
        confine = Confinement.of_project(project_dir, (home,) if hidden is None else hidden)
        dirs = list(user_profile_dirs(home) if user_dirs is None else user_dirs)
        seen = {_identity(d.path) for d in dirs}
        # A project at the user's home would otherwise scan ~/.claude/agents
        # twice, the second time as a project dir.
        dirs += [d for d in project_profile_dirs(project_dir) if _identity(d.path) not in seen]
        ignored: dict[str, str] = {}
        found: list[ProfileEntry] = [
            ProfileEntry(name=name, source="built-in", scope="built-in", profile=profile)
            for name, profile in builtins.items()
        ]
        # Plugins rank lowest after the built-ins, as in Claude Code; their
        # names are namespaced, so this only matters for odd names.
        for plugin_dir in plugin_dirs:
            found += _load_plugin(plugin_dir, ignored)
        for profile_dir in dirs:
            found += _load_dir(
                profile_dir, ignored, confine if profile_dir.scope == "project" else None
            )
        return cls(_assign_aliases(_apply_precedence(found)), ignored)

    def resolve(self, requested: str) -> AgentProfile:
        """The launchable profile ``requested`` means, by name or alias (S-TOOL-2).

        Raises :class:`AmbiguousAgentTypeError` or :class:`UnknownAgentTypeError`
        as :func:`resolve_agent_name` does, and :class:`ProfileUnavailableError`
        when the name only matches profiles that cannot be launched, with
        their reasons (a broken file's parse error among them).
        """
        # An alias normalises to no other name (see _assign_aliases), so a
        # profile and its alias are never reported as ambiguous.
        try:
            name = resolve_agent_name(requested, [*self.profiles, *self.aliases])
        except UnknownAgentTypeError:
            # A bare name that several plugins use has no alias (S-PROF-3);
            # asking for it is ambiguous, not unknown.
            wanted = normalize_agent_name(requested)
            plugged = [
                e.name
                for e in self.entries
                if e.launchable
                and e.plugin is not None
                and normalize_agent_name(_bare(e)) == wanted
            ]
            if len(plugged) > 1:
                raise AmbiguousAgentTypeError(requested, plugged) from None
            unavailable = self._unavailable(requested)
            if unavailable:
                raise ProfileUnavailableError(requested, unavailable, self.profiles) from None
            raise UnknownAgentTypeError(requested, self.profiles) from None
        return self.profiles[self.aliases.get(name, name)]

    def _unavailable(self, requested: str) -> list[ProfileEntry]:
        wanted = normalize_agent_name(requested)
        hits = []
        for entry in self.entries:
            if entry.launchable or entry.overridden_by is not None:
                continue
            names = {entry.name, _bare(entry)}
            if requested in names or wanted in {normalize_agent_name(n) for n in names}:
                hits.append(entry)
        return hits

    def to_json(self) -> dict[str, Any]:
        """Everything found, JSON-ready, for ``subvisor agents --json``."""
        return {
            "profiles": [entry.to_json() for entry in self.entries],
            "ignored": [{"path": path, "reason": why} for path, why in self.ignored.items()],
        }


def _identity(path: Path) -> Path:
    try:
        return path.resolve()
    except OSError:
        return path.absolute()


def _bare(entry: ProfileEntry) -> str:
    if entry.plugin is not None and entry.name.startswith(f"{entry.plugin}:"):
        return entry.name[len(entry.plugin) + 1 :]
    return entry.name


#: Entries one profile dir's walk reads at most: a link to ``/`` in a repository's
#: ``.claude/agents`` must not make every catalog load walk the machine.
WALK_ENTRIES = 20_000
#: Levels of directories below a profile dir that are scanned: a subagent can nest
#: thousands, and no profile is that deep.
WALK_DEPTH = 32


def _profile_files(
    root: Path, ignored: dict[str, str], confine: Confinement | None = None
) -> Iterator[Path]:
    """Profile files under ``root``, sorted per dir, following links but never in a loop.

    Top-down and depth first, as ``os.walk`` goes, but without recursion (a
    subagent can nest directories deeper than Python's stack). At most
    ``WALK_ENTRIES`` entries are read and ``WALK_DEPTH`` levels below ``root``;
    what is left unscanned is said in ``ignored``, on one line each. With
    ``confine``, a dir that resolves outside it is not listed (said likewise).
    """
    if not root.is_dir():
        return
    visited: set[tuple[int, int]] = set()
    budget = WALK_ENTRIES
    too_deep: list[Path] = []
    todo: list[tuple[Path, int]] = [(root, 0)]
    while todo:
        current, depth = todo.pop()
        listed = _list_dir(current, visited, ignored, confine)
        if listed is None:
            continue
        subdirs, files = listed
        budget -= len(subdirs) + len(files)
        if budget < 0:
            ignored[str(root)] = (
                f"not scanned past {WALK_ENTRIES} entries (a link to a large tree?): "
                "profiles below that were not loaded"
            )
            return
        for name in files:
            path = current / name
            if not name.startswith(".") and path.suffix.lower() in PROFILE_SUFFIXES:
                yield path
        subdirs = [d for d in subdirs if not d.startswith((".", _TASK_OUTPUT_PREFIX))]
        if subdirs and depth == WALK_DEPTH:
            too_deep += (current / d for d in subdirs)
            continue
        todo += ((current / d, depth + 1) for d in reversed(subdirs))
    if too_deep:
        more = f" and {len(too_deep) - 1} more" if len(too_deep) > 1 else ""
        ignored[str(too_deep[0])] = (
            f"not scanned: more than {WALK_DEPTH} directories deep below {root}{more};"
            " profiles there were not loaded"
        )


def _list_dir(
    path: Path,
    visited: set[tuple[int, int]],
    ignored: dict[str, str],
    confine: Confinement | None = None,
) -> tuple[list[str], list[str]] | None:
    """The sorted subdir and other names of ``path``; None if it was seen or cannot be read."""
    try:
        # Listed through the descriptor that was checked: a link swapped in
        # after the check is not what is listed.
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError as exc:
        ignored[str(exc.filename or path)] = f"cannot be scanned: {exc.strerror or exc}"
        return None
    try:
        if confine is not None:
            confine.check_fd(fd, path)
        info = os.fstat(fd)
        if (info.st_dev, info.st_ino) in visited:
            return None
        visited.add((info.st_dev, info.st_ino))
        with os.scandir(fd) as entries:
            subdirs: list[str] = []
            files: list[str] = []
            for entry in entries:
                try:
                    is_dir = entry.is_dir()  # a link to a dir counts: links are followed
                except OSError:
                    is_dir = False
                (subdirs if is_dir else files).append(entry.name)
    except OutsideConfinementError as exc:
        _refuse(path, exc.strerror or str(exc), ignored)
        return None
    except OSError as exc:
        ignored[str(exc.filename or path)] = f"cannot be scanned: {exc.strerror or exc}"
        return None
    finally:
        os.close(fd)
    return sorted(subdirs), sorted(files)


def _refuse(path: Path, why: str, ignored: dict[str, str]) -> None:
    reason = f"not loaded: {why}; {_REFUSED_HINT}"
    ignored[str(path)] = reason
    log.warning("project profile %s %s", path, reason)


def _default_name(path: Path, root: Path, dialect: ProfileDialect) -> str:
    # Claude Code names by frontmatter only, so a file's folder means nothing
    # there; opencode names by the path below its agent dir.
    if dialect == "claude":
        return path.stem
    return path.relative_to(root).with_suffix("").as_posix()


def _load_file(
    path: Path,
    root: Path,
    scope: ProfileScope,
    dialect: ProfileDialect,
    ignored: dict[str, str],
    plugin: str | None = None,
    confine: Confinement | None = None,
) -> ProfileEntry | None:
    default = _default_name(path, root, dialect)
    try:
        profile = parse_profile_file(
            path, scope=scope, default_name=default, dialect=dialect, plugin=plugin, confine=confine
        )
    except RefusedProfileFileError as exc:
        _refuse(path, exc.message, ignored)
        return None
    except NotAProfileError as exc:
        ignored[str(path)] = exc.message
        return None
    except ProfileError as exc:
        name = exc.profile_name or (f"{plugin}:{default}" if plugin else default)
        return ProfileEntry(
            name=name, source=str(path), scope=scope, dialect=dialect, plugin=plugin, error=exc
        )
    return ProfileEntry(
        name=profile.name,
        source=str(path),
        scope=scope,
        dialect=dialect,
        plugin=plugin,
        profile=profile,
        warnings=profile.warnings,
    )


def _load_dir(
    profile_dir: ProfileDir, ignored: dict[str, str], confine: Confinement | None
) -> list[ProfileEntry]:
    entries = []
    for path in _profile_files(profile_dir.path, ignored, confine):
        entry = _load_file(
            path, profile_dir.path, profile_dir.scope, profile_dir.dialect, ignored, confine=confine
        )
        if entry is not None:
            entries.append(entry)
    return entries


def _load_plugin(plugin_dir: Path, ignored: dict[str, str]) -> list[ProfileEntry]:
    manifest_path = plugin_dir / PLUGIN_MANIFEST
    try:
        text = read_regular_file(manifest_path, _MAX_MANIFEST_BYTES).decode("utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) else str(exc)
        return [
            _manifest_error(
                plugin_dir,
                f"not a plugin: cannot read {PLUGIN_MANIFEST} ({reason})",
            )
        ]
    try:
        manifest = json.loads(text)
    except json.JSONDecodeError as exc:
        return [_manifest_error(plugin_dir, f"invalid JSON: {exc.msg}", line=exc.lineno)]
    if not isinstance(manifest, dict):
        return [_manifest_error(plugin_dir, "the manifest must be a JSON object")]
    name = manifest.get("name")
    if not isinstance(name, str) or not name.strip() or ":" in name or name != name.strip():
        return [
            _manifest_error(
                plugin_dir,
                f"'name' must be the plugin's name, without ':' or surrounding spaces; got "
                f"{name!r}",
                line=_json_line(text, '"name"'),
                field="name",
            )
        ]
    listed = manifest.get("agents", [])
    if isinstance(listed, str):
        listed = [listed]
    if not isinstance(listed, list) or not all(isinstance(item, str) for item in listed):
        return [
            _manifest_error(
                plugin_dir,
                "'agents' must be a path or a list of paths relative to the plugin",
                line=_json_line(text, '"agents"'),
                field="agents",
                plugin=name,
            )
        ]
    root = _identity(plugin_dir)
    entries: list[ProfileEntry] = []
    paths: dict[Path, Path] = {}  # file -> the dir it was found under (for its default name)
    for path in _profile_files(plugin_dir / "agents", ignored):
        paths.setdefault(path, plugin_dir / "agents")
    for item in listed:
        target = plugin_dir / item
        inside = _identity(target).is_relative_to(root)
        if not inside or not target.exists():
            problem = "is outside the plugin" if not inside else "does not exist"
            entries.append(
                _manifest_error(
                    plugin_dir,
                    f"'agents' lists {item!r}, which {problem}",
                    line=_json_line(text, json.dumps(item)),
                    field="agents",
                    plugin=name,
                    entry_name=f"{name}:{Path(item).stem}",
                )
            )
        elif target.is_dir():
            for path in _profile_files(target, ignored):
                paths.setdefault(path, target)
        else:
            paths.setdefault(target, target.parent)
    for path, found_under in paths.items():
        entry = _load_file(path, found_under, "plugin", "claude", ignored, plugin=name)
        if entry is not None:
            entries.append(entry)
    return entries


def _manifest_error(
    plugin_dir: Path,
    message: str,
    *,
    line: int | None = None,
    field: str | None = None,
    plugin: str | None = None,
    entry_name: str | None = None,
) -> ProfileEntry:
    source = str(plugin_dir / PLUGIN_MANIFEST)
    name = entry_name or plugin or plugin_dir.name
    error = ProfileError(source, message, line=line, field=field, profile_name=name)
    return ProfileEntry(
        name=name, source=source, scope="plugin", dialect="claude", plugin=plugin, error=error
    )


def _json_line(text: str, needle: str) -> int | None:
    at = text.find(needle)
    return None if at < 0 else text.count("\n", 0, at) + 1


def _apply_precedence(found: Sequence[ProfileEntry]) -> list[ProfileEntry]:
    """Later entries of a name replace earlier ones; broken entries take no part."""
    entries = list(found)
    winner: dict[str, int] = {}
    for index, entry in enumerate(entries):
        if entry.error is not None:
            continue
        previous = winner.get(entry.name)
        if previous is not None:
            loser = entries[previous]
            entries[previous] = replace(loser, overridden_by=entry.source)
            entry = replace(entry, overrides=(*loser.overrides, loser.source))
            # Across kinds of dir (Claude Code's, then ours) replacing is the
            # design; two files of one kind naming one profile is a slip.
            if (loser.scope, loser.dialect) == (entry.scope, entry.dialect):
                entry = replace(
                    entry,
                    warnings=(
                        *entry.warnings,
                        f"the name {entry.name!r} is also used by {loser.source}; this file wins",
                    ),
                )
            entries[index] = entry
        winner[entry.name] = index
    for index, entry in enumerate(entries):
        shadowed = winner.get(entry.name)
        if entry.error is not None and shadowed is not None and shadowed < index:
            target = entries[shadowed]
            entries[shadowed] = replace(
                target,
                warnings=(
                    *target.warnings,
                    f"{entry.source} would override this profile but failed to load: "
                    f"{entry.error.message}",
                ),
            )
    return entries


def _assign_aliases(entries: list[ProfileEntry]) -> list[ProfileEntry]:
    """Give each plugin profile its bare name when that name is unambiguous (S-PROF-3)."""
    plugin_bare: dict[str, set[str]] = {}
    taken: set[str] = set()
    for entry in entries:
        taken.add(normalize_agent_name(entry.name))
        if entry.plugin is not None:
            # A broken plugin file still claims its bare name, so that fixing
            # it later cannot silently move an alias to another plugin.
            plugin_bare.setdefault(normalize_agent_name(_bare(entry)), set()).add(entry.name)
    result = []
    for entry in entries:
        if entry.plugin is not None and entry.error is None and entry.overridden_by is None:
            key = normalize_agent_name(_bare(entry))
            if len(plugin_bare[key]) == 1 and key not in taken:
                entry = replace(entry, aliases=(_bare(entry),))
        result.append(entry)
    return result
