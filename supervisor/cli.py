"""The ``subvisor`` command line."""

from __future__ import annotations

import argparse
import sys

from rich.console import Console
from rich.table import Table

__all__ = ["main"]


def _doctor(args: argparse.Namespace) -> int:
    from ._doctor import run_checks

    console = Console()
    checks = run_checks()
    table = Table(title="subvisor doctor", show_lines=False)
    table.add_column("check")
    table.add_column("ok")
    table.add_column("detail")
    for check in checks:
        table.add_row(check.name, "[green]yes[/]" if check.ok else "[red]NO[/]", check.detail)
    console.print(table)
    failed = [check for check in checks if not check.ok]
    if failed:
        console.print(
            f"[red]{len(failed)} check(s) failed:[/] " + "; ".join(c.name for c in failed)
        )
        return 1
    console.print("[green]all checks passed[/]")
    return 0


def build_parser() -> argparse.ArgumentParser:
    """The argument parser for every subcommand."""
    parser = argparse.ArgumentParser(
        prog="subvisor", description="Run AI subagents as isolated, supervised processes."
    )
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    doctor = commands.add_parser("doctor", help="check this machine and time a worker spawn")
    doctor.set_defaults(handler=_doctor)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``subvisor`` console script."""
    args = build_parser().parse_args(argv)
    code: int = args.handler(args)
    return code


if __name__ == "__main__":
    sys.exit(main())
