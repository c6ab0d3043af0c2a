"""What in a project's files waits for the user's trust, and the gate that asks (S-SEC-3).

A repository, or a subagent that wrote into it, controls the project's
``.mcp.json`` and ``subvisor.toml``. Four kinds of setting there act outside
every sandbox, so they take effect only once the user trusted that exact
content: an MCP server (a stdio command runs unsandboxed, with the user's
environment; a URL is connected from the supervisor), a provider's
endpoint or key (``base_url``, ``api_key``, ``api_key_env``, ``api``:
anything but its timeouts and streaming), which decide where the bearer key
goes, the root agent's ``model`` (the root's tools run in the supervisor,
unsandboxed: the model that drives them is the user's choice; a ``scripted:``
one is refused outright, ``_config_files``), and where agents run
(``placement``). A file with none of them needs no trust. A server's relative paths
(``server.py``, ``./srv.js``) name files in the supervisor's current
directory (it starts elsewhere, ``delegation._mcp_launch``), so trust is
bound to that directory as well as to the file and its content
(``_trust_store``).

``TrustGate`` is what a command does with a file the user has not trusted:
refuse (asking first at a terminal), leave its trust-needing settings out
(commands that start nothing), or trust it for this run only
(``--trust-project``). ``load_settings``, the one reader of project files,
applies the gate itself; ``Subvisor`` and ``SubvisorSettings`` never read a
project, so library callers pass servers explicitly.

Every string shown comes from the file, so it is shown with control
characters escaped: a file cannot redraw the question it is asked about.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import shlex
import stat
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from pydantic import ValidationError

from ..delegation._mcp import McpServerConfig
from ..delegation._mcp_launch import DIRECTORY_ENTRY_FILES, path_words, server_launch
from ..files._input_files import open_regular_file
from ..files._printable import printable
from ..kernel import validation_problems
from ..providers import ANTHROPIC_DEFAULT_BASE_URL, OPENAI_DEFAULT_BASE_URL
from ._errors import ConfigError
from ._trust_store import TrustStore, content_digest

__all__ = [
    "AskTrust",
    "TrustGate",
    "TrustRequest",
    "UntrustedProjectError",
    "mcp_json_trust_request",
    "printable",
    "toml_trust_request",
    "without_trust_needing",
]

#: Provider settings that cannot redirect traffic or keys.
_HARMLESS_PROVIDER_KEYS = frozenset(
    {"streaming", "connect_timeout_s", "read_timeout_s", "call_timeout_s", "max_tokens_param"}
)
_KEY_HEADERS = {"openai": "Authorization", "anthropic": "x-api-key"}
_DEFAULT_URLS = {"openai": OPENAI_DEFAULT_BASE_URL, "anthropic": ANTHROPIC_DEFAULT_BASE_URL}


@dataclass(frozen=True)
class TrustRequest:
    """A project file whose settings wait for trust, and exactly what they would do."""

    #: The file, absolute, as named in the project (the store keys trust by ``trust_path``).
    path: Path
    #: The directory its commands run in (the supervisor's): trust is bound to it too.
    workdir: Path
    #: Computes ``digest``, once, when first asked: the files a server names are read
    #: only where there is a trusted digest to compare with, or a question to ask.
    hashed: Callable[[], str] = field(repr=False, compare=False)
    #: MCP servers it would start or connect.
    servers: tuple[str, ...]
    #: Providers whose endpoint or key it sets.
    providers: tuple[str, ...]
    #: One line per server or provider: command, args, env names, cwd; or URL and key.
    details: tuple[str, ...]
    #: The root agent's model it picks, if any.
    model: str | None = None

    @functools.cached_property
    def digest(self) -> str:
        """sha256 of the exact bytes that were read and parsed, and of the files it names."""
        return self.hashed()

    def effect(self) -> str:
        """What trusting it lets happen, in a few words."""
        parts = []
        if self.servers:
            parts.append(
                f"start MCP server{'s' if len(self.servers) > 1 else ''}"
                f" {', '.join(map(printable, self.servers))} outside any sandbox"
            )
        if self.providers:
            parts.append(
                "send model calls and API keys where it says"
                f" (provider{'s' if len(self.providers) > 1 else ''}"
                f" {', '.join(map(printable, self.providers))})"
            )
        if self.model is not None:
            parts.append(f"run the root agent, unsandboxed, on the model {printable(self.model)}")
        if not parts:
            parts.append("move agents to a Ray cluster")
        return " and ".join(parts)


#: Shows a request and says whether to trust it; ``changed``: it was trusted with other content.
AskTrust = Callable[[TrustRequest, bool], bool]


class UntrustedProjectError(ConfigError):
    """A project file needs the user's trust before its settings can take effect."""

    def __init__(self, request: TrustRequest, *, changed: bool, declined: bool = False) -> None:
        if declined:
            state = "was not trusted; nothing was started"
        elif changed:
            state = "changed since you trusted it"
        else:
            state = "is not trusted"
        super().__init__(
            f"{printable(str(request.path))} {state}: it would {request.effect()}; review and"
            f" trust it with `subvisor trust {shlex.quote(str(request.path))}`, or pass"
            " --trust-project to trust it for this run only"
        )
        self.request = request


@dataclass(frozen=True, slots=True)
class TrustGate:
    """What a command does with a project file the user has not trusted.

    ``refuse``: ask with ``ask`` if given (at a terminal), recording a yes;
    else raise ``UntrustedProjectError``. ``leave-out``: its trust-needing
    settings are left out (for commands that start nothing).
    ``trust-this-run``: take it as trusted, recording nothing (CI).
    """

    untrusted: Literal["refuse", "leave-out", "trust-this-run"] = "refuse"
    ask: AskTrust | None = None

    def admit(self, requests: Sequence[TrustRequest], store: TrustStore) -> frozenset[Path]:
        """The files of ``requests`` whose settings may take effect."""
        admitted: set[Path] = set()
        for request in requests:
            if self.untrusted == "trust-this-run":
                admitted.add(request.path)
                continue
            trusted = store.digest_of(request.path, request.workdir)
            if self.untrusted == "leave-out" and trusted is None:
                continue  # nothing to compare: none of the files it names is read
            if trusted == request.digest:
                admitted.add(request.path)
                continue
            if self.untrusted == "leave-out":
                continue
            changed = trusted is not None
            if self.ask is None:
                raise UntrustedProjectError(request, changed=changed)
            if not self.ask(request, changed):
                raise UntrustedProjectError(request, changed=changed, declined=True)
            store.grant(request.path, request.workdir, request.digest)
            admitted.add(request.path)
        return frozenset(admitted)


def mcp_json_trust_request(
    path: Path, content: bytes, servers: Mapping[str, McpServerConfig]
) -> TrustRequest | None:
    """What a ``.mcp.json`` holding ``servers`` would do; None if it has none."""
    if not servers:
        return None
    workdir = Path.cwd()
    named = {name: _named_files(config, workdir, path) for name, config in servers.items()}
    details = tuple(
        _server_detail(name, config, workdir, named[name]) for name, config in servers.items()
    )
    hashed = functools.partial(
        _digest_with_files, content, [f for files in named.values() for f in files]
    )
    return TrustRequest(path.absolute(), workdir, hashed, tuple(servers), (), details)


#: Past this size a named file counts by its size and ctime instead of its bytes.
_MAX_HASHED_BYTES = 64 * 1024 * 1024


def _named_files(config: McpServerConfig, workdir: Path, path: Path) -> list[Path]:
    """The regular files in the project of ``path`` (or in ``workdir``) that a server's
    command line names.

    ``python3 server.py``, ``node ./srv.js``, ``node --require=./boot.js``: a
    workspace-write subagent can rewrite them, and the server would run the
    rewrite outside any sandbox at the next start. A directory where a script
    stands (``python3 ./srv``) names the file it runs (``DIRECTORY_ENTRY_FILES``,
    a ``package.json``'s ``main``). Trust is bound to their content too (S-SEC-3).
    """
    if config.url is not None:
        return []
    workdir, project = workdir.resolve(), path.absolute().parent.resolve()
    base = workdir if config.cwd is None else workdir / config.cwd
    found: list[Path] = []
    words = [((config.command or ""), False), *path_words(config.args)]
    for word, as_script in words:
        try:
            candidate = (base / word).resolve()
            candidates = [candidate]
            if as_script and candidate.is_dir():
                candidates = _entry_files(candidate)
        except (OSError, RuntimeError, ValueError):
            continue
        for named in candidates:
            inside = named.is_relative_to(project) or named.is_relative_to(workdir)
            if inside and named.is_file() and named not in found:
                found.append(named)
    return found


#: The most of a ``package.json`` read for its ``main``.
_MAX_PACKAGE_JSON_BYTES = 1024 * 1024


def _entry_files(directory: Path) -> list[Path]:
    """What an interpreter may run for script ``directory``, resolved."""
    files = [directory / name for name in DIRECTORY_ENTRY_FILES]
    package = directory / "package.json"
    files.append(package)
    try:
        with open_regular_file(package) as stream:
            main = json.loads(stream.read(_MAX_PACKAGE_JSON_BYTES)).get("main")
        if isinstance(main, str):
            files.append(directory / main)
    except (OSError, ValueError, AttributeError, RecursionError):
        pass
    return [file.resolve() for file in files]


def _digest_with_files(content: bytes, files: Iterable[Path]) -> str:
    """``content_digest`` of the file, and of the project ``files`` its servers' commands name.

    At most ``_HASHED_BYTES_IN_ALL`` bytes are read in all, smallest files first,
    each file once however many names it has: a file past that (or past
    ``_MAX_HASHED_BYTES``) counts by its size and ctime, which any rewrite
    changes, so a repository naming many large (sparse) files costs one read
    of 64 MiB at most, not one per name.
    """
    files = list(dict.fromkeys(files))
    if not files:
        return content_digest(content)
    infos: dict[Path, os.stat_result | OSError] = {}
    for file in files:
        try:
            infos[file] = os.stat(file)
        except OSError as exc:
            infos[file] = exc
    first: dict[tuple[int, int], Path] = {}
    hashed: set[Path] = set()
    budget = _HASHED_BYTES_IN_ALL
    found = [(file, info) for file, info in infos.items() if isinstance(info, os.stat_result)]
    for file, info in sorted(found, key=lambda item: item[1].st_size):
        if first.setdefault((info.st_dev, info.st_ino), file) != file:
            continue
        if info.st_size <= min(budget, _MAX_HASHED_BYTES):
            hashed.add(file)
            budget -= info.st_size
    parts = [content]
    for file in files:
        named = infos[file]
        if isinstance(named, OSError):
            fingerprint = f"unreadable: {named.strerror}"
        elif first[(named.st_dev, named.st_ino)] != file:
            fingerprint = f"same file as {first[(named.st_dev, named.st_ino)]}"
        elif file in hashed:
            fingerprint = _file_digest(file, named)
        else:
            fingerprint = _size_and_ctime(named)
        parts.append(f"\0{file}\0{fingerprint}".encode())
    return content_digest(b"".join(parts))


#: Bytes read in all to hash the files one project file's servers name.
_HASHED_BYTES_IN_ALL = 64 * 1024 * 1024


def _size_and_ctime(info: os.stat_result) -> str:
    # ctime, which no process can set back, not mtime.
    return f"{info.st_size}:{info.st_ctime_ns}"


def _file_digest(file: Path, info: os.stat_result) -> str:
    """sha256 of ``file`` (``info``: its stat), reading no more than its size then."""
    try:
        # Non-blocking: a FIFO swapped in after the stat cannot hang the open.
        fd = os.open(file, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as exc:
        return f"unreadable: {exc.strerror}"
    with open(fd, "rb", buffering=0) as opened:
        now = os.fstat(fd)
        same = (now.st_dev, now.st_ino, now.st_size) == (info.st_dev, info.st_ino, info.st_size)
        if not same or not stat.S_ISREG(now.st_mode):
            return _size_and_ctime(now)  # changed since the stat: not read
        digest = hashlib.sha256()
        left = info.st_size + 1  # one more byte: whether it grew
        try:
            while left > 0 and (chunk := opened.read(min(left, 1 << 20))):
                digest.update(chunk)
                left -= len(chunk)
        except OSError as exc:
            return f"unreadable: {exc.strerror}"
        if left == 0:
            return _size_and_ctime(os.fstat(fd))  # grew while read
        return digest.hexdigest()


def toml_trust_request(
    path: Path, content: bytes, data: Mapping[str, Any], user: Mapping[str, Any]
) -> TrustRequest | None:
    """What a project ``subvisor.toml`` (parsed: ``data``) would do; None if nothing waits.

    ``user``: the user's config, to say which key a provider would send.
    """
    servers = _table(data, "mcp_servers")
    workdir = Path.cwd()
    details = []
    files: list[Path] = []
    for name, raw in servers.items():
        try:
            config = McpServerConfig.model_validate(raw)
        except ValidationError as exc:
            raise ConfigError(
                f"{path}: mcp_servers.{name}: {validation_problems(exc)}; fix it or remove it"
            ) from None
        named = _named_files(config, workdir, path)
        files += named
        details.append(_server_detail(name, config, workdir, named))
    user_providers = _table(_table(user, "gateway"), "providers")
    providers = _trust_needing_providers(data)
    for name in providers:
        entry = {**_table(user_providers, name), **_table(_providers(data), name)}
        details.append(_provider_detail(name, entry, sets_key="api_key" in _providers(data)[name]))
    placement = _placement_detail(data)
    if placement is not None:
        details.append(placement)
    model = _root_model(data)
    if model is not None:
        details.append(
            f"model {printable(model)}: the root agent (and every subagent that inherits)"
            " runs on it; the root's tools run unsandboxed, in the supervisor"
        )
    if not details:
        return None
    hashed = functools.partial(_digest_with_files, content, files)
    return TrustRequest(
        path.absolute(), workdir, hashed, tuple(servers), providers, tuple(details), model
    )


#: Keys of a project file that pick the root agent's model: ``SubvisorSettings.model``
#: (a workflow's actors fall back to it as well).
ROOT_MODEL_KEYS = ("model",)


def _root_model(data: Mapping[str, Any]) -> str | None:
    for key in ROOT_MODEL_KEYS:
        if key in data:
            return str(data[key])
    return None


#: Where agents run: a project file may only move them to a cluster once trusted,
#: since its machines then see every prompt and tool result (S-SEC-3, S-DIST-1).
_PLACEMENT_KEYS = frozenset({"placement", "ray_address"})


def _placement_detail(data: Mapping[str, Any]) -> str | None:
    if not _PLACEMENT_KEYS & set(data):
        return None
    where = data.get("ray_address", "auto")
    return (
        f"placement {data.get('placement', 'local')!s}: runs its agents' workers on the "
        f"Ray cluster at {where!s}, whose machines see their prompts and results"
    )


def without_trust_needing(data: Mapping[str, Any]) -> dict[str, Any]:
    """``data`` (a parsed project ``subvisor.toml``) less what waits for trust."""
    kept = {
        key: value
        for key, value in data.items()
        if key != "mcp_servers" and key not in _PLACEMENT_KEYS and key not in ROOT_MODEL_KEYS
    }
    untrusted = _trust_needing_providers(data)
    if untrusted:
        gateway = dict(_table(data, "gateway"))
        gateway["providers"] = {
            name: entry for name, entry in _providers(data).items() if name not in untrusted
        }
        kept["gateway"] = gateway
    return kept


def _table(data: Mapping[str, Any], key: str) -> Mapping[str, Any]:
    """``data[key]`` if it is a table; a wrong shape is left to validation."""
    value = data.get(key)
    return value if isinstance(value, dict) else {}


def _providers(data: Mapping[str, Any]) -> Mapping[str, Any]:
    return _table(_table(data, "gateway"), "providers")


def _trust_needing_providers(data: Mapping[str, Any]) -> tuple[str, ...]:
    return tuple(
        name
        for name, entry in _providers(data).items()
        if isinstance(entry, dict) and set(entry) - _HARMLESS_PROVIDER_KEYS
    )


def _server_detail(name: str, config: McpServerConfig, workdir: Path, named: Sequence[Path]) -> str:
    if config.url is not None:
        return f"MCP server {printable(name)}: connects to {printable(config.url)}"
    launch = server_launch(config, workdir)
    command = shlex.join([launch.command, *launch.args])
    detail = (
        f"MCP server {printable(name)}: runs {printable(command)} outside any sandbox,"
        f" in {printable(launch.cwd)}"
    )
    if config.cwd is None:
        detail += f" (its relative paths are from {printable(str(workdir))})"
    if named:
        shown = ", ".join(printable(str(f)) for f in named)
        detail += f" (trust covers the content of {shown} too, not what it imports)"
    if config.env:
        detail += f", setting {', '.join(map(printable, config.env))}"
    return detail


def _provider_detail(name: str, entry: Mapping[str, Any], *, sets_key: bool) -> str:
    api = str(entry.get("api") or name)
    url = entry.get("base_url") or f"{_DEFAULT_URLS.get(api, '?')} (its default)"
    if sets_key:
        key = "the api_key written in this file"
    elif entry.get("api_key"):
        key = "the api_key of your config"
    else:
        key = f"${entry.get('api_key_env') or name.upper().replace('-', '_') + '_API_KEY'}"
    header = _KEY_HEADERS.get(api, "?")
    return (
        f"provider {printable(name)} ({printable(api)} API): model calls go to"
        f" {printable(str(url))}, with {printable(key)} in the {header} header"
    )
