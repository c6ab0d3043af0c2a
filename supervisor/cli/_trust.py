"""``subvisor trust`` and the terminal question of every command that reads a project (S-SEC-3)."""

from __future__ import annotations

import sys
from pathlib import Path

from ..config._config_files import (
    MCP_JSON,
    PROJECT_CONFIG,
    project_trust_requests,
    read_config_bytes,
)
from ..config._errors import ConfigError
from ..config._project_trust import TrustGate, TrustRequest
from ..config._trust_store import TrustStore, content_digest, trust_path
from ..files._printable import printable
from ..kernel import inside_worker_tree_reason
from ..state._paths import subvisor_home

__all__ = ["ask_at_terminal", "trust_command", "trust_gate"]


def trust_gate(trust_project: bool) -> TrustGate:
    """The gate of a command that starts a project's servers and providers.

    ``--trust-project`` trusts for this run only; at a terminal (stdin and
    stderr) the person is asked; else an untrusted file is an error.
    """
    if trust_project:
        return TrustGate("trust-this-run")
    if sys.stdin.isatty() and sys.stderr.isatty():
        return TrustGate("refuse", ask=ask_at_terminal)
    return TrustGate("refuse")


def _summary(request: TrustRequest) -> str:
    lines = [f"{printable(str(request.path))} (sha256 {request.digest[:12]}) would:"]
    lines += [f"  - {detail}" for detail in request.details]
    return "\n".join(lines)


def ask_at_terminal(request: TrustRequest, changed: bool) -> bool:
    """Show what ``request``'s file would do on stderr; read yes or no from stdin."""
    state = "changed since you trusted it" if changed else "is not trusted yet"
    sys.stderr.write(
        f"\nThis project's {request.path.name} {state}.\n{_summary(request)}\n"
        "Trust this exact content (a later change asks again)? [y/N] "
    )
    sys.stderr.flush()
    answer = sys.stdin.readline()
    return answer.strip().lower() in ("y", "yes")


def _files_at(path: Path) -> list[Path]:
    """The project files ``path`` names: a directory's two, or one of them."""
    if path.is_dir():
        return [path / PROJECT_CONFIG, path / MCP_JSON]
    if path.name not in (PROJECT_CONFIG, MCP_JSON):
        raise ConfigError(
            f"{path} is neither a {PROJECT_CONFIG} nor a {MCP_JSON}: pass one of them or the"
            " project directory"
        )
    return [path]


def _refuse_inside_worker_tree() -> None:
    # As the supervisor itself does (S-SEC-7): a process /proc does not name counts as
    # inside, since nothing shows it is not.
    reason = inside_worker_tree_reason()
    if reason is not None:
        raise ConfigError(
            f"{reason}: trusting a project is the user's decision, never a subagent's"
        )


def trust_command(path: Path, *, list_trusted: bool = False, revoke: bool = False) -> int:
    """``subvisor trust``: show and trust (or ``revoke``) ``path``'s files, or list trusted ones."""
    store = TrustStore(subvisor_home())
    if list_trusted:
        return _list(store)
    _refuse_inside_worker_tree()
    path = path.absolute()
    if not revoke and not path.exists():
        raise ConfigError(f"{printable(str(path))} does not exist: pass a project directory")
    files = _files_at(path)
    if revoke:
        revoked = [file for file in files if store.revoke(file)]
        for file in revoked:
            print(f"revoked {printable(str(file))}")
        if not revoked:
            print(f"nothing trusted at {printable(str(path))}")
        return 0
    project_dir = path if path.is_dir() else path.parent
    named = {trust_path(file) for file in files}
    requests = [r for r in project_trust_requests(project_dir) if trust_path(r.path) in named]
    if not requests:
        print(
            f"nothing at {printable(str(path))} needs trust: no MCP servers, provider"
            " endpoints or keys, model or placement"
        )
        return 0
    for request in requests:
        print(_summary(request))
        store.grant(request.path, request.workdir, request.digest)
        print(
            f"trusted {printable(str(request.path))} for commands run in"
            f" {printable(str(request.workdir))}; a change to it asks again"
        )
    return 0


def _list(store: TrustStore) -> int:
    entries = store.entries()
    if not entries:
        print(f"no project file is trusted ({store.path})")
    for entry in entries:
        try:
            content = read_config_bytes(entry.path)
        except ConfigError:
            state = "not a readable file (asks again)"
        else:
            if content is None:
                state = "missing"
            elif content_digest(content) == entry.sha256:
                state = "trusted"
            else:
                state = "changed since trusted (asks again)"
        print(
            f"{printable(str(entry.path))}  in {printable(str(entry.workdir))}"
            f"  sha256 {entry.sha256[:12]}  {state}"
        )
    return 0
