"""``subvisor agents``: every profile this project sees, where it came from, and what is wrong."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from rich.table import Table

from ..config._config_files import load_settings
from ..config._project_trust import TrustGate
from ..profiles._profile_catalog import ProfileCatalog
from ..state._paths import known_homes
from ._console import quoted, shown
from ._run import wide_console

__all__ = ["agents_command"]


def agents_command(project_dir: Path, as_json: bool) -> int:
    """List the profiles of ``project_dir`` (S-PROF-3); exit 1 when a profile failed to load."""
    # Lists profiles and starts nothing: untrusted servers and providers are left out.
    settings = load_settings(project_dir, trust=TrustGate("leave-out"))
    catalog = ProfileCatalog.discover(
        project_dir,
        home=settings.home,
        plugin_dirs=settings.plugin_dirs,
        hidden=known_homes(settings.home),
    )
    broken = [entry for entry in catalog.entries if entry.error is not None]
    if as_json:
        sys.stdout.write(json.dumps(catalog.to_json(), indent=2) + "\n")
        return 1 if broken else 0
    console = wide_console()
    table = Table(title=f"agent profiles for {quoted(str(project_dir))}", title_justify="left")
    for column in ("name", "scope", "tools", "model", "source", "status"):
        table.add_column(column, overflow="fold")
    for entry in catalog.entries:
        profile = entry.profile
        tools = "-"
        if profile is not None:
            tools = "all" if not profile.lists_tools else ", ".join(profile.tools or ())
            if profile.disallowed_tools:
                tools += f" (not {', '.join(profile.disallowed_tools)})"
        status = "[green]ok[/]"
        if entry.not_launchable is not None:
            colour = "red" if entry.error is not None else "yellow"
            status = f"[{colour}]{quoted(entry.not_launchable)}[/]"
        if entry.overrides:
            status += f"\noverrides {quoted(', '.join(entry.overrides))}"
        if entry.warnings:
            status += "\n[yellow]" + quoted("; ".join(entry.warnings)) + "[/]"
        name = entry.name + (f" (alias {', '.join(entry.aliases)})" if entry.aliases else "")
        table.add_row(
            shown(name),
            shown(entry.scope),
            shown(tools),
            shown(profile.model or "inherit") if profile is not None else "-",
            shown(entry.source),
            status,
        )
    console.print(table)
    if broken:
        console.print(f"[red]{len(broken)} profile(s) failed to load[/]; the others work")
    return 1 if broken else 0
