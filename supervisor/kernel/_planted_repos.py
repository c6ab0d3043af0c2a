"""Repositories a worker planted in its writable roots, disarmed once its tree is gone (S-SEC-3).

While a workspace-write worker runs, its project's ``.git`` is read-only
(``worker._mounts``), but nothing keeps it from making a repository
elsewhere below a writable root: ``git init sub``, a bare repository, a
``.git`` file or symlink that points at a directory it can write, or a
change to a ``.git`` deeper than the protected walk reaches. Git runs what
such a repository's config names (``core.fsmonitor``, ``core.hooksPath``,
filter drivers, ``credential.helper``, ...) and its hooks, outside any
sandbox, the next time the user runs git there. Landlock grants by path,
not by name, so making them cannot be refused. Instead, once the worker's
whole tree has ended (nothing of it is left to race with), the supervisor
walks each of its writable roots and disarms every repository whose
metadata changed since the worker started:

- a config that holds any entry outside ``SAFE_KEYS`` is replaced by one
  that holds only its safe entries (remotes, branches, the repository
  format); the original is kept beside it, as ``config.subvisor-disarmed``;
- a hook (any file in ``hooks/`` but a ``*.sample``) is renamed to
  ``NAME.subvisor-disarmed``, a name git never runs; so is a ``hooks`` that
  is a symlink.

"Changed since" is an inode's ctime, which no process can set back (that
takes the system clock, ``CAP_SYS_TIME``, which workers drop). A config the
user changed while the worker ran is treated alike: nothing is lost, the
original is kept, and the finding is reported.

Other workers may still write a root while it is walked, and may swap a
directory for a symlink between two steps of the walk, which works on
paths. So each walk runs in a thread of its own that Landlock confines to
its root (``walk_confined``): whatever a path leads to by then, the kernel
lets it read and change only what lies beneath the root. A ``.git`` file
or symlink that points out of the root is not followed.

Walks are shared (``RepositorySweeps``): a worker that ends while a walk of
its root runs waits for the next walk, which starts after its tree is gone
and covers every worker waiting for it (from the earliest start), so a
fan-out pays one walk per batch, not one per worker. A walk during which
another writer of the root (or of a directory inside or around it) was
alive, or began, covers nothing: that writer could move a repository out of
its way and back (see ``RepositorySweeps``), so the next walk, at the latest
the one after the last of them ends, looks as far back again. A walk reads
again only the directories whose entries changed since the last one (``_Listing``):
on this repository's tree (3,500 directories, 33,000 entries) the first
walk takes about 100 ms of CPU, the next ones about 20.

Not covered: the time while the worker still runs (a git command the user
runs meanwhile in a repository it planted), a directory the walk cannot
read, and anything past ``WALK_ENTRIES`` (said in the findings). A
supervisor killed before the walk (or after a walk that covered nothing)
leaves it to whatever opens its store next (``state._recovery``), from the
roots recorded with each task.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import queue
import secrets
import stat
import subprocess
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import TypeVar

import trio

from worker import _landlock

from ._own_code import _within, own_code

__all__ = [
    "CTIME_SLACK_S",
    "DISARMED_SUFFIX",
    "GIT_PARSES",
    "SAFE_KEYS",
    "WALK_ENTRIES",
    "RepositorySweeps",
    "disarm_planted",
    "render_config",
    "roots_overlap",
    "trusted_git",
    "walk_confined",
]

log = logging.getLogger(__name__)
_T = TypeVar("_T")

#: How far a ctime may lag ``time.time()``: the kernel stamps inodes from a
#: coarse clock, a tick behind. A worker's writes may carry a ctime this much
#: before its start, and a directory's listing is reused only once its ctime
#: is this much older than the walk.
CTIME_SLACK_S = 1.0
#: What a disarmed config or hook is renamed to end with.
DISARMED_SUFFIX = ".subvisor-disarmed"
#: Entries read in one walk of one root, at most.
WALK_ENTRIES = 2_000_000
#: Configs one walk has git read; past that, a changed config is set aside whole.
GIT_PARSES = 1000
#: Config entries that make git run nothing: ``(section, has a subsection)`` to
#: names. Everything else (``core.fsmonitor``, ``core.hooksPath``,
#: ``core.sshCommand``, ``filter.*``, ``diff.*.textconv``, ``include.*``,
#: ``remote.*.uploadpack``, ``submodule.*.update``, ``protocol.*``, ...) goes.
SAFE_KEYS: dict[tuple[str, bool], frozenset[str]] = {
    ("core", False): frozenset(
        {
            "repositoryformatversion",
            "filemode",
            "bare",
            "logallrefupdates",
            "ignorecase",
            "precomposeunicode",
            "symlinks",
            "autocrlf",
            "eol",
            "safecrlf",
            "abbrev",
            "compression",
            "quotepath",
            "checkstat",
            "trustctime",
            "sharedrepository",
        }
    ),
    ("extensions", False): frozenset({"objectformat", "refstorage", "worktreeconfig"}),
    ("remote", True): frozenset(
        {"url", "pushurl", "fetch", "push", "tagopt", "prune", "mirror", "skipfetchall"}
    ),
    ("branch", True): frozenset({"remote", "merge", "rebase", "pushremote", "description"}),
    ("submodule", True): frozenset({"url", "active", "branch"}),
    ("user", False): frozenset({"name", "email"}),
    ("init", False): frozenset({"defaultbranch"}),
    ("pull", False): frozenset({"rebase", "ff"}),
    ("push", False): frozenset({"default", "autosetupremote"}),
    ("fetch", False): frozenset({"prune"}),
    ("index", False): frozenset({"version"}),
}
_CONFIG_NAMES = ("config", "config.worktree")
_BARE_MARKS = frozenset({"HEAD", "objects", "refs"})
_MAX_CONFIG_BYTES = 1 << 20
#: Where ``trusted_git`` looks, and the ``PATH`` it runs with.
_SYSTEM_PATH = "/usr/bin:/bin:/usr/local/bin"
_GIT_TIMEOUT_S = 10.0


def disarm_planted(roots: Iterable[str], since: float) -> list[str]:
    """Disarm every repository below ``roots`` whose config or hooks changed after ``since``.

    ``since`` is a ``time.time()``. Returns one line per thing done (or not
    checked), naming the path. Symlinks are never followed in the walk.
    """
    findings: list[str] = []
    for root in roots:
        walk_confined(_Walk(since, findings), root)
    return findings


_DirKey = tuple[int, int]


@dataclass(frozen=True, slots=True)
class _Listing:
    """What a walk needs of one directory's entries: valid while its ctime is unchanged.

    Every change to a directory's entries (made, removed, renamed) sets its
    ctime, so a later walk that finds the same ctime reuses this instead of
    reading the directory again: it then costs one ``lstat`` per directory.
    """

    ctime_ns: int
    #: Subdirectories (symlinks excluded), ``.git`` ones included.
    subdirs: tuple[str, ...]
    #: ``.git`` entries that are not directories (a gitfile, a symlink).
    pointers: tuple[str, ...]
    #: It holds ``HEAD``, ``objects`` and ``refs``: a repository itself.
    bare: bool


@dataclass
class _Walk:
    since: float
    findings: list[str]
    #: Listings of the last walk of this root, by (device, inode).
    previous: dict[_DirKey, _Listing] = field(default_factory=dict)
    #: This walk's listings that a later walk may trust.
    listings: dict[_DirKey, _Listing] = field(default_factory=dict)
    budget: int = WALK_ENTRIES
    parses: int = GIT_PARSES
    seen: set[str] = field(default_factory=set)
    #: The root walked, resolved: no ``.git`` pointer leads this walk out of it.
    root: str = ""

    def run(self, root: str) -> None:
        self.root = os.path.realpath(root)
        visited: set[_DirKey] = set()
        # A directory changed within a clock tick of the walk may change again
        # with the same ctime (the kernel stamps from a coarse clock): its
        # listing is not kept for the next walk.
        settled = time.time() - CTIME_SLACK_S
        stack = [root]
        while stack:
            directory = stack.pop()
            try:
                info = os.stat(directory, follow_symlinks=False)
            except OSError:
                continue
            key = (info.st_dev, info.st_ino)
            if not stat.S_ISDIR(info.st_mode) or key in visited:
                continue
            visited.add(key)
            listing = self.previous.get(key)
            if listing is None or listing.ctime_ns != info.st_ctime_ns:
                listing = self.read(directory, info)
                if listing is None:
                    continue
                if self.budget < 0:
                    self.findings.append(
                        f"{root}: not checked past {WALK_ENTRIES} entries; "
                        "repositories below it may hold hooks or config a subagent wrote"
                    )
                    return
            if info.st_ctime < settled:
                self.listings[key] = listing
            if listing.bare:
                with contextlib.suppress(OSError):
                    self.gitdir(directory)
            prefix = directory if directory.endswith("/") else directory + "/"
            for name in listing.pointers:
                with contextlib.suppress(OSError):
                    self.pointer(prefix + name)
            for name in listing.subdirs:
                path = prefix + name
                if name == ".git":
                    with contextlib.suppress(OSError):
                        self.gitdir(path)
                stack.append(path)

    def read(self, directory: str, info: os.stat_result) -> _Listing | None:
        entries = self.listing(directory, info)
        if entries is None:
            return None
        self.budget -= len(entries)
        subdirs: list[str] = []
        pointers: list[str] = []
        marks = 0
        for entry in entries:
            name = entry.name
            with contextlib.suppress(OSError):
                if entry.is_dir(follow_symlinks=False):
                    subdirs.append(name)
                elif name == ".git":
                    pointers.append(name)
            if name in _BARE_MARKS:
                marks += 1
        return _Listing(info.st_ctime_ns, tuple(subdirs), tuple(pointers), marks == 3)

    def changed(self, info: os.stat_result) -> bool:
        return info.st_ctime >= self.since

    def listing(self, directory: str, info: os.stat_result) -> list[os.DirEntry[str]] | None:
        """The entries of ``directory``; None where it cannot be read.

        A worker may hide a repository in a directory it makes unreadable but
        still traversable (mode 0111: the user can ``cd`` through it by name).
        One of ours that changed since the worker started is made readable
        again, and that is said; one that did not is as the user left it.
        """
        try:
            return _entries(directory)
        except PermissionError as exc:
            if not self.changed(info):
                return None
            if info.st_uid != os.geteuid():
                self.findings.append(f"{directory}: not checked for planted repositories: {exc}")
                return None
            os.chmod(directory, stat.S_IMODE(info.st_mode) | stat.S_IRUSR | stat.S_IXUSR)
            self.findings.append(f"{directory}: made readable to check it for planted repositories")
            return _entries(directory)
        except OSError as exc:
            if self.changed(info) or exc.errno == errno.ENAMETOOLONG:
                self.findings.append(f"{directory}: not checked for planted repositories: {exc}")
            return None

    def pointer(self, path: str) -> None:
        """A ``.git`` file (``gitdir: PATH``) or symlink: check the directory it names."""
        info = os.lstat(path)
        if stat.S_ISLNK(info.st_mode):
            target = os.path.realpath(path)
        elif stat.S_ISREG(info.st_mode):
            line = _read_small(path).split(b"\n", 1)[0].strip()
            if not line.startswith(b"gitdir:"):
                return
            named = os.fsdecode(line[7:].strip())
            target = os.path.join(os.path.dirname(path), named)
        else:
            return
        target = os.path.realpath(target)
        # Only what lies in the root is this walk's (and what the worker could write).
        if _within(target, self.root) and os.path.isdir(target):
            self.gitdir(target)

    def gitdir(self, gitdir: str) -> None:
        if gitdir in self.seen:
            return
        self.seen.add(gitdir)
        dirs = [gitdir]
        with contextlib.suppress(OSError):
            # A worktree's gitdir: its config and hooks are those of the common dir.
            named = _read_small(os.path.join(gitdir, "commondir")).strip()
            common = os.path.realpath(os.path.join(gitdir, os.fsdecode(named)))
            if named and _within(common, self.root) and os.path.isdir(common):
                dirs.append(common)
        for directory in dirs:
            for name in _CONFIG_NAMES:
                with contextlib.suppress(OSError):
                    self.config(os.path.join(directory, name))
            with contextlib.suppress(OSError):
                self.hooks(os.path.join(directory, "hooks"))

    def config(self, path: str) -> None:
        info = os.lstat(path)
        if not self.changed(info):
            return
        self.parses -= 1
        entries = _read_config(path, info) if self.parses >= 0 else None
        if entries is None:
            _set_aside(path)
            self.findings.append(f"{path}: set aside (a link, too large, or unreadable by git)")
            return
        unsafe = sorted({key for key, _ in entries if not _safe(key)})
        if not unsafe:
            return
        kept = [(key, value) for key, value in entries if _safe(key)]
        replacement = f"{path}.{secrets.token_hex(4)}.tmp"
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
        fd = _in_own_dir(os.path.dirname(path), lambda: os.open(replacement, flags, 0o644))
        with os.fdopen(fd, "w", encoding="utf-8", errors="surrogateescape") as f:
            f.write(render_config(kept))
        aside = _set_aside(path)
        os.rename(replacement, path)
        shown = ", ".join(unsafe[:6]) + (f" and {len(unsafe) - 6} more" if len(unsafe) > 6 else "")
        self.findings.append(f"{path}: removed {shown} (the original is {aside})")

    def hooks(self, path: str) -> None:
        info = os.lstat(path)
        if stat.S_ISLNK(info.st_mode):
            if self.changed(info):
                aside = _set_aside(path)
                self.findings.append(f"{path}: a symlink, set aside as {aside}")
            return
        if not stat.S_ISDIR(info.st_mode):
            return
        # Git runs a hook in a directory it may only traverse (mode 0111).
        listing = _in_own_dir(path, lambda: _entries(path))
        hooks = [e for e in listing if not e.name.endswith((".sample", DISARMED_SUFFIX))]
        for hook in hooks:
            with contextlib.suppress(OSError):
                if self.changed(hook.stat(follow_symlinks=False)):
                    aside = _set_aside(hook.path)
                    self.findings.append(f"{hook.path}: a hook, set aside as {aside}")


#: Where the system's git and what it loads live: readable to a confined walk.
_SYSTEM_DIRS = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/etc/ld.so.cache")


def _confine_to(root: str) -> None:
    """Confine this thread (and what it starts) by Landlock to ``root``; see ``walk_confined``."""
    abi = _landlock.abi_version()
    if abi < 1:
        log.warning("no Landlock: the walk of %s is not confined to it", root)
        return
    access = _landlock.fs_access_for_abi(abi)
    readable = [p for p in (*_SYSTEM_DIRS, *own_code()) if os.path.exists(p)]
    ruleset = _landlock.Ruleset(
        handled_fs=access,
        handled_net=_landlock.NetAccess(0),
        scoped=_landlock.Scope(0),
        paths=[
            _landlock.PathRule(root, access),
            _landlock.PathRule(os.devnull, _landlock.FILE_ACCESS),
            *(_landlock.PathRule(p, _landlock.READ_ACCESS) for p in readable),
        ],
    )
    _landlock.restrict_self(ruleset, thread_only=True)


class _ConfinedWalker:
    """A thread that Landlock keeps to one root, walking it each time it is asked.

    Landlock confines one thread when asked to, and for good: so each root
    gets a thread of its own, which confines itself once and then serves
    every walk of that root (a new thread and ruleset per walk cost about
    0.5 ms of the supervisor's CPU).
    """

    def __init__(self, root: str) -> None:
        self.root = root
        self._jobs: queue.SimpleQueue[tuple[_Walk, threading.Event, list[BaseException]] | None]
        self._jobs = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._serve, name=f"sweep {root}", daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        confined: BaseException | None = None
        try:
            _confine_to(self.root)
        except BaseException as exc:  # every walk then fails with it, unconfined never
            confined = exc
        while (job := self._jobs.get()) is not None:
            walk, done, failure = job
            try:
                if confined is not None:
                    raise confined
                walk.run(self.root)
            except BaseException as exc:  # handed to the caller's thread
                failure.append(exc)
            finally:
                done.set()

    def walk(self, walk: _Walk) -> None:
        """``walk.run(root)`` in this thread (blocking the caller until it is done)."""
        done, failure = threading.Event(), list[BaseException]()
        self._jobs.put((walk, done, failure))
        done.wait()
        if failure:
            raise failure[0]

    def close(self) -> None:
        """Let the thread end once its walks are done."""
        self._jobs.put(None)


def walk_confined(walk: _Walk, root: str) -> None:
    """``walk.run(root)`` in a thread of its own that Landlock keeps to ``root`` (S-SEC-3).

    Other workers may still write the root while it is walked, and the walk
    works on paths: a directory swapped for a symlink between two of its
    steps would make it rename, read or write where the path now leads,
    outside every worker's reach (subvisor's home, another repository). In
    its Landlock domain it may write only beneath ``root``, and read only
    there, the system's git and its libraries, and subvisor's own code
    (which a lazy import may need): the kernel refuses the rest, whatever a
    path resolves to by then. Where the kernel has no Landlock the walk runs
    unconfined, as the log says.
    """
    walker = _ConfinedWalker(root)
    try:
        walker.walk(walk)
    finally:
        walker.close()


def _safe(key: str) -> bool:
    section, _, rest = key.partition(".")
    subsection, _, name = rest.rpartition(".")
    return name.lower() in SAFE_KEYS.get((section.lower(), bool(subsection)), frozenset())


def _set_aside(path: str) -> str:
    """Rename ``path`` to a free ``PATH.subvisor-disarmed[.N]``; that name."""
    aside, n = path + DISARMED_SUFFIX, 1
    while os.path.lexists(aside):
        n += 1
        aside = f"{path}{DISARMED_SUFFIX}.{n}"
    _in_own_dir(os.path.dirname(path), lambda: os.rename(path, aside))
    return aside


def _in_own_dir(directory: str, change: Callable[[], _T]) -> _T:
    """``change()`` in ``directory``, first made ours to read and write if it is ours.

    A worker can leave a ``hooks/`` it made (or a directory of ours it
    could write) read-only or traverse-only: git still runs the hooks in it.
    """
    try:
        return change()
    except PermissionError:
        info = os.lstat(directory)
        if info.st_uid != os.geteuid() or not stat.S_ISDIR(info.st_mode):
            raise
        os.chmod(directory, stat.S_IMODE(info.st_mode) | stat.S_IRWXU)
        return change()


def _entries(directory: str) -> list[os.DirEntry[str]]:
    with os.scandir(directory) as listing:
        return list(listing)


def _read_small(path: str) -> bytes:
    """The first 4 KiB of the regular file at ``path`` (b"" if it is anything else).

    Never blocks: a worker may leave a FIFO where a file is looked for.
    """
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW | os.O_CLOEXEC)
    try:
        return os.read(fd, 4096) if stat.S_ISREG(os.fstat(fd).st_mode) else b""
    finally:
        os.close(fd)


def _read_config(path: str, info: os.stat_result) -> list[tuple[str, str | None]] | None:
    """The entries of the config file at ``path`` as git reads them; None if it cannot say.

    Git itself parses it (``--file``: no includes followed, nothing run), so
    the entries are exactly what git would act on. Without a trusted git
    (``trusted_git``) the file is set aside whole (None).
    """
    git = trusted_git()
    if git is None or not stat.S_ISREG(info.st_mode) or info.st_size > _MAX_CONFIG_BYTES:
        return None
    env = {
        "PATH": _SYSTEM_PATH,
        "GIT_CONFIG_NOSYSTEM": "1",
        "GIT_CONFIG_GLOBAL": os.devnull,
        "LC_ALL": "C",
    }
    try:
        listed = subprocess.run(
            [git, "config", "--file", path, "--no-includes", "--null", "--list"],
            cwd="/",
            env=env,
            capture_output=True,
            timeout=_GIT_TIMEOUT_S,
            check=True,
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    entries: list[tuple[str, str | None]] = []
    for item in listed.split(b"\0")[:-1]:
        key, newline, value = os.fsdecode(item).partition("\n")
        entries.append((key, value if newline else None))
    return entries


def trusted_git() -> str | None:
    """The system's ``git``: owned by root and writable by nobody else; None if there is none.

    Never one found on ``PATH``: a ``PATH`` can name a directory in a project
    (an activated virtualenv's ``bin``, ``node_modules/.bin``) where a
    subagent could have put a ``git`` of its own for the supervisor to run.
    """
    for directory in _SYSTEM_PATH.split(":"):
        with contextlib.suppress(OSError):
            path = os.path.realpath(os.path.join(directory, "git"))
            info = os.stat(path)
            if (
                stat.S_ISREG(info.st_mode)
                and info.st_uid == 0
                and not info.st_mode & (stat.S_IWGRP | stat.S_IWOTH)
            ):
                return path
    return None


def render_config(entries: Iterable[tuple[str, str | None]]) -> str:
    """A git config file holding ``entries`` (``section[.subsection].name``, value) in order."""
    lines: list[str] = []
    current: tuple[str, str] | None = None
    for key, value in entries:
        section, _, rest = key.partition(".")
        subsection, _, name = rest.rpartition(".")
        if (section, subsection) != current:
            current = (section, subsection)
            quoted = subsection.replace("\\", "\\\\").replace('"', '\\"')
            lines.append(f'[{section} "{quoted}"]' if subsection else f"[{section}]")
        if value is None:
            lines.append(f"\t{name}")
        else:
            escaped = (
                value.replace("\\", "\\\\")
                .replace('"', '\\"')
                .replace("\n", "\\n")
                .replace("\t", "\\t")
                .replace("\b", "\\b")
            )
            lines.append(f'\t{name} = "{escaped}"')
    return "\n".join(lines) + "\n" if lines else ""


@dataclass
class _Sweep:
    done: trio.Event = field(default_factory=trio.Event)
    findings: list[str] = field(default_factory=list)


class RepositorySweeps:
    """One walk at a time per root, shared by every worker that ended before it began.

    Race: a walk works on paths, so a writer of the root that is still alive
    can move a planted repository out of the walk's way while it runs (a
    rename away after its directory was listed, and back once the walk
    passed) and hide it from that walk. A writer of a directory inside the
    root, or around it, can do as much (a project's ``.subvisor/agent-memory``
    dir is a root of its own for a read-only agent with memory). Such a walk
    covers nothing: each root keeps the earliest start of the ended workers
    that no *quiet* walk has covered (one that began with no writer of the
    root or of a root inside or around it alive, and during which none
    began), and every walk looks for what changed since then. A writer's end
    walks its roots and every root around or inside them that some walk
    left uncovered, so the walk after the last writer ends is quiet unless
    another one begins meanwhile, and then the walk after that one ends is.
    """

    def __init__(self) -> None:
        self._next: dict[str, _Sweep] = {}
        self._running: set[str] = set()
        #: Each root's live writers (worker ids).
        self._writers: dict[str, set[str]] = {}
        #: Roots being walked that a writer of theirs began or ended during.
        self._disturbed: set[str] = set()
        #: Each root's earliest start of an ended worker no quiet walk covered.
        self._uncovered: dict[str, float] = {}
        #: Each root's directory listings, kept from one walk to the next.
        self._listings: dict[str, dict[_DirKey, _Listing]] = {}
        #: Each root's confined thread, kept for the walks that follow.
        self._walkers: dict[str, _ConfinedWalker] = {}

    def close(self) -> None:
        """End the confined threads (call once no walk runs)."""
        for walker in self._walkers.values():
            walker.close()
        self._walkers.clear()

    def begin(self, worker: str, roots: Iterable[str]) -> None:
        """Count ``worker`` as a live writer of ``roots`` (before it runs anything)."""
        roots = tuple(dict.fromkeys(roots))
        for root in roots:
            self._writers.setdefault(root, set()).add(worker)
        self._disturb(roots)

    async def after(self, worker: str, roots: Iterable[str], since: float) -> tuple[str, ...]:
        """Disarm what ``worker``, started at ``since``, may have planted in ``roots``.

        Call once its whole tree has ended. Returns the findings of the walks
        that covered it (they may name what other workers planted too), and
        of the walks of roots inside or around them that an earlier walk left
        uncovered while this worker was alive.
        """
        roots = tuple(dict.fromkeys(roots))
        for root in roots:
            writers = self._writers.get(root)
            if writers is not None:
                writers.discard(worker)
                if not writers:
                    del self._writers[root]
            self._uncovered[root] = min(self._uncovered.get(root, since), since)
        self._disturb(roots)
        # This worker may be what kept the walk of a root around or inside its
        # own from counting: walk that root again now.
        walked = dict.fromkeys(
            (*roots, *(r for r in self._uncovered if any(roots_overlap(r, own) for own in roots)))
        )
        sweeps = []
        for root in walked:
            sweep = self._next.get(root)
            if sweep is None:
                sweep = self._next[root] = _Sweep()
            sweeps.append(sweep)
            if root not in self._running:
                self._running.add(root)
                trio.lowlevel.spawn_system_task(self._run, root, name=f"sweep {root}")
        findings: list[str] = []
        for sweep in sweeps:
            await sweep.done.wait()
            findings.extend(sweep.findings)
        return tuple(dict.fromkeys(findings))

    def _disturb(self, roots: tuple[str, ...]) -> None:
        """A writer of ``roots`` began or ended: a walk of one of them now covers nothing."""
        for walked in self._running:
            if any(roots_overlap(walked, root) for root in roots):
                self._disturbed.add(walked)

    async def _run(self, root: str) -> None:
        # A system task: it must not raise, and every waiter must be woken,
        # even when the run ends under it.
        sweep: _Sweep | None = None
        try:
            while (sweep := self._next.pop(root, None)) is not None:
                since = self._uncovered.get(root)
                if since is None:  # a quiet walk covered it since it was asked for
                    sweep.done.set()
                    continue
                # No checkpoint from here to the walk's start: what began or
                # ended before it is in ``_writers``, what does after in ``_disturbed``.
                self._disturbed.discard(root)
                quiet = not any(roots_overlap(root, other) for other in self._writers)
                walk = _Walk(since, [], self._listings.pop(root, {}))
                try:
                    walker = self._walkers.get(root)
                    if walker is None:
                        walker = self._walkers[root] = _ConfinedWalker(root)
                    await trio.to_thread.run_sync(walker.walk, walk)
                    sweep.findings = walk.findings
                    self._listings[root] = walk.listings
                    # Nobody could move anything out of its way: every worker
                    # that ended before it began is covered.
                    if quiet and root not in self._disturbed:
                        del self._uncovered[root]
                except Exception as exc:
                    sweep.findings = [f"{root}: not checked for planted repositories: {exc}"]
                for line in sweep.findings:
                    log.warning("planted repository disarmed (S-SEC-3): %s", line)
                sweep.done.set()
        finally:
            self._running.discard(root)
            self._disturbed.discard(root)
            for left in (sweep, self._next.pop(root, None)):
                if left is not None and not left.done.is_set():
                    left.findings = [f"{root}: not checked for planted repositories (shut down)"]
                    left.done.set()


def roots_overlap(a: str, b: str) -> bool:
    """One of the roots ``a`` and ``b`` (absolute, resolved) lies in the other, or they are one."""
    return _within(a, b) or _within(b, a)
