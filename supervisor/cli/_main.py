"""The ``subvisor`` command line."""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
from pathlib import Path

from ._console import SafeConsole, quoted
from ._input import positive_seconds

__all__ = ["build_parser", "main"]


def _doctor(args: argparse.Namespace) -> int:
    from rich.table import Table

    from ._doctor import run_checks

    console = SafeConsole()
    checks = run_checks()
    table = Table(title="subvisor doctor")
    table.add_column("check")
    table.add_column("ok")
    table.add_column("detail")
    for check in checks:
        table.add_row(check.name, "[green]yes[/]" if check.ok else "[red]NO[/]", check.detail)
    console.print(table)
    failed = [check.name for check in checks if not check.ok]
    if failed:
        console.print(f"[red]{len(failed)} check(s) failed:[/] " + ", ".join(failed))
        return 1
    console.print("[green]all checks passed[/]")
    return 0


def _run(args: argparse.Namespace, *, demo: bool) -> int:
    from ..config._config_files import load_settings
    from ..config._project_trust import TrustGate
    from ..kernel import tune_collector
    from ._input import working_directory
    from ._run import RunRequest, demo_scenario_path, run_command
    from ._trust import trust_gate

    cwd = working_directory(args.cwd)
    # S-SBX-1: the command line's sandbox overrides every profile and the config.
    forced = {
        key: value
        for key, value in (("force_mode", args.sandbox), ("force_network", args.network))
        if value is not None
    }
    settings = load_settings(
        cwd,
        # The demo's scripted model needs none of the project's servers or providers.
        trust=TrustGate("leave-out") if demo else trust_gate(args.trust_project),
        sandbox=forced or None,
        max_concurrent_subagents=args.max_concurrent_subagents,
        max_subagents_per_session=args.max_subagents_per_session,
        **_placement(args),
    )
    if demo:
        model = f"scripted:{demo_scenario_path()}"
        prompt = "Survey this directory."
    else:
        model = args.model or os.environ.get("SUBVISOR_MODEL") or settings.model or ""
        prompt = args.prompt
        if not model:
            SafeConsole(stderr=True).print(
                "[red]no model configured[/]: pass --model provider:model (for example "
                "openai:gpt-4o-mini, anthropic:claude-sonnet-4-5, or scripted:scenario.yaml), "
                "set SUBVISOR_MODEL, or put `model = ...` in $SUBVISOR_HOME/config.toml"
            )
            return 2
    tune_collector()
    return run_command(
        RunRequest(
            prompt=prompt,
            model=model,
            cwd=cwd,
            settings=settings,
            json=args.json,
            timeout_s=args.timeout,
            narrate=demo,
            approve=args.approve or ("ask" if sys.stdin.isatty() and not args.json else "deny"),
        )
    )


def _add_ray(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--ray",
        metavar="ADDRESS",
        help="run the subagents' workers on the Ray cluster at ADDRESS (host:port of its "
        "head, or auto); needs pip install 'subvisor[ray]' (placement = \"ray\")",
    )


def _placement(args: argparse.Namespace) -> dict[str, str | None]:
    """The settings ``--ray`` overrides (none when it is not given)."""
    address = getattr(args, "ray", None)
    if address is None:
        return {}
    return {"placement": "ray", "ray_address": address}


def _add_run(
    commands: argparse._SubParsersAction[argparse.ArgumentParser], name: str, helptext: str
) -> None:
    """``run`` (a PROMPT, a --model) or ``demo`` (the built-in scripted model)."""
    demo = name == "demo"
    sub = commands.add_parser(name, help=helptext)
    if not demo:
        sub.add_argument("prompt", help="the task for the root agent")
        sub.add_argument("--model", help="provider:model for the root (and inheriting children)")
    sub.add_argument("--json", action="store_true", help="print a JSON report on stdout")
    sub.add_argument("--cwd", default=".", help="working directory of the agents")
    sub.add_argument(
        "--timeout", type=positive_seconds, help="stop everything after this many seconds"
    )
    sub.add_argument(
        "--approve",
        choices=("ask", "allow", "deny"),
        help="who answers permission asks: ask at the terminal (the default on one), "
        "allow them all, or deny them all (the default otherwise)",
    )
    sub.add_argument(
        "--sandbox",
        choices=("read-only", "workspace-write", "full"),
        help="kernel sandbox of every subagent, whatever its profile says (default: "
        "read-only for Explore and profiles without Write/Edit, else workspace-write)",
    )
    sub.add_argument(
        "--network",
        choices=("deny", "allow"),
        help="TCP for every subagent, whatever its profile says (default: deny)",
    )
    sub.add_argument(
        "--max-concurrent-subagents",
        type=int,
        metavar="N",
        help="subagents alive at once; further launches wait in order (default 20)",
    )
    sub.add_argument(
        "--max-subagents-per-session",
        type=int,
        metavar="N",
        help="subagents one session may launch; further launches fail (default 200)",
    )
    _add_ray(sub)
    if not demo:
        _add_trust_project(sub)
    sub.set_defaults(handler=lambda a: _run(a, demo=demo))


def _add_trust(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    trust = commands.add_parser(
        "trust",
        help="review a project's MCP servers and provider settings, and trust that content",
    )
    trust.add_argument(
        "path",
        nargs="?",
        default=".",
        help="the project directory, or its subvisor.toml or .mcp.json (default: .)",
    )
    trust_action = trust.add_mutually_exclusive_group()
    trust_action.add_argument("--list", action="store_true", help="list the trusted files")
    trust_action.add_argument("--revoke", action="store_true", help="forget the trust of PATH")
    trust.set_defaults(handler=_trust)


def _add_stress(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    stress = commands.add_parser("stress", help="delegate many scripted subagents, with faults")
    stress.add_argument("--agents", type=int, default=100, help="subagents the root launches")
    stress.add_argument(
        "--concurrency",
        "--max-concurrent-subagents",
        dest="concurrency",
        type=int,
        default=20,
        help="workers alive at once (max_concurrent_subagents); further launches wait in order",
    )
    stress.add_argument(
        "--max-subagents-per-session",
        type=int,
        help="launches the session may make (default: --agents); further ones fail clearly",
    )
    stress.add_argument("--background-ratio", type=float, default=0.5)
    stress.add_argument(
        "--fault-rate",
        type=float,
        help="share of agents that commit a fault (default: 1 with --faults, else 0)",
    )
    stress.add_argument(
        "--faults",
        help="comma list of segfault,exit,oom,hang (default: all four, at --fault-rate)",
    )
    stress.add_argument("--turns", type=int, default=2, help="model turns per subagent")
    stress.add_argument("--latency-ms", default="10", help="per turn: N or LOW-HIGH (uniform)")
    stress.add_argument("--idle-timeout", type=float, default=5.0, help="seconds (catches hangs)")
    stress.add_argument("--seed", type=int, default=0)
    stress.add_argument("--json", action="store_true")
    _add_ray(stress)
    stress.add_argument(
        "--report",
        metavar="FILE",
        action="append",
        default=[],
        help="also write a timeline and latency histograms to FILE (.html or .png; may be "
        "given twice); needs pip install 'subvisor[report]'",
    )
    stress.set_defaults(handler=_stress)


def _add_agents(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    agents = commands.add_parser(
        "agents",
        help="list the agent profiles this project sees (exit 1 if one failed to load)",
        description="List the agent profiles this project sees: where each came from, what it "
        "overrides, and why a broken file was skipped.",
        epilog="Exit status: 0 when every profile loaded; 1 when any profile failed to load "
        "(the others still work: the listing says which failed and why); 2 for bad arguments.",
    )
    agents.add_argument(
        "--json", action="store_true", help="the profiles as JSON (same exit status)"
    )
    agents.add_argument("--cwd", default=".", help="project directory")
    agents.set_defaults(handler=_agents)


def _add_task_command(
    commands: argparse._SubParsersAction[argparse.ArgumentParser],
    name: str,
    helptext: str,
    *,
    session: bool = False,
) -> None:
    """``ps`` (of a SESSION, --json), or ``stop``/``bg`` (of a TASK_ID)."""
    sub = commands.add_parser(name, help=helptext)
    if session:
        sub.add_argument("session", nargs="?", help="session id (default: the latest root session)")
        sub.add_argument("--json", action="store_true")
    else:
        sub.add_argument("task_id", help="agentId (a unique prefix is enough)")
    sub.set_defaults(handler=lambda a: _tasks(name, a))


def build_parser() -> argparse.ArgumentParser:
    """The argument parser for every subcommand."""
    parser = argparse.ArgumentParser(
        prog="subvisor", description="Run AI subagents as isolated, supervised processes."
    )
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    doctor = commands.add_parser("doctor", help="check this machine and time a worker spawn")
    doctor.set_defaults(handler=_doctor)
    _add_run(commands, "run", "run a root agent on PROMPT; it may delegate to subagents")
    _add_run(commands, "demo", "offline demo on the built-in scripted model")
    _add_trust(commands)
    _add_stress(commands)
    _add_agents(commands)
    _add_task_command(
        commands, "ps", "list the tasks of the latest (or a given) session", session=True
    )

    logs = commands.add_parser("logs", help="a subagent's transcript and output")
    logs.add_argument("task_id", help="agentId (a unique prefix is enough)")
    logs.add_argument(
        "-f",
        "--follow",
        action="store_true",
        help="then follow it live (new messages, the answer as it streams) until it ends",
    )
    logs.set_defaults(handler=lambda a: _tasks("logs", a))

    _add_task_command(commands, "stop", "stop a running subagent")
    _add_top(commands)
    _add_task_command(commands, "bg", "move a running foreground subagent to the background")
    _add_mcp(commands)
    _add_workflow(commands)
    return parser


def _add_top(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    top = commands.add_parser(
        "top", help="live view of a running session's subagents (stop, background, transcripts)"
    )
    top.add_argument("session", nargs="?", help="session id (default: the latest live session)")
    top.add_argument(
        "--page-size", type=int, default=20, help="subagents per page, 1 to 100 (default 20)"
    )
    top.set_defaults(handler=_top)


def _add_workflow(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    flows = commands.add_parser("workflow", help="run a workflow script of named actors")
    flow_commands = flows.add_subparsers(dest="workflow_command", required=True, metavar="ACTION")
    flow_run = flow_commands.add_parser("run", help="run SCRIPT (amend an earlier run)")
    flow_run.add_argument("script", help="a Python file with one @workflow async function")
    flow_run.add_argument("--amend", metavar="RUN_ID", help="replay this run's unchanged asks")
    flow_run.add_argument("--model", help="provider:model for every actor of this run")
    flow_run.add_argument(
        "--input", action="append", default=[], metavar="KEY=VALUE", help="a workflow input"
    )
    flow_run.add_argument("--json", action="store_true", help="print a JSON report on stdout")
    flow_run.add_argument("--cwd", default=".", help="working directory of the actors")
    _add_trust_project(flow_run)
    _add_ray(flow_run)
    flow_run.set_defaults(handler=_workflow_run)
    flow_show = flow_commands.add_parser("show", help="a run's actors and asks (or recent runs)")
    flow_show.add_argument("run_id", nargs="?", help="run id (a unique prefix is enough)")
    flow_show.add_argument("--json", action="store_true")
    flow_show.set_defaults(handler=_workflow_show)


def _add_mcp(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    mcp = commands.add_parser(
        "mcp",
        help="serve Agent, SendMessage, TaskList, TaskOutput and TaskStop to MCP clients",
        description="Serve subvisor's subagents over MCP: stdio by default (for a client that "
        "starts this command), or streamable HTTP with --http.",
        epilog="Over HTTP on a non-loopback address, clients must send "
        "'Authorization: Bearer $SUBVISOR_MCP_TOKEN'.",
    )
    mcp.add_argument(
        "--model",
        help="provider:model the subagents run on (default: config), or mcp-sampling: the "
        "client's own model, through MCP sampling with tools",
    )
    mcp.add_argument("--cwd", default=".", help="the project directory of the agents")
    mcp.add_argument(
        "--http",
        metavar="HOST:PORT",
        help="serve streamable HTTP at http://HOST:PORT/mcp instead of stdio (loopback unless "
        "--allow-remote)",
    )
    mcp.add_argument(
        "--allow-remote",
        action="store_true",
        help="allow a non-loopback --http address; needs a token in SUBVISOR_MCP_TOKEN",
    )
    mcp.add_argument(
        "--approve",
        choices=("allow", "deny"),
        default="deny",
        help="the answer to a permission ask when the client cannot elicit (default: deny)",
    )
    mcp.add_argument(
        "--ask-timeout",
        type=positive_seconds,
        default=120.0,
        metavar="SECONDS",
        help="how long an ask put to the client may wait; then it is denied (default 120)",
    )
    mcp.add_argument(
        "--sandbox",
        choices=("read-only", "workspace-write", "full"),
        help="kernel sandbox of every subagent, whatever its profile says",
    )
    mcp.add_argument(
        "--network", choices=("deny", "allow"), help="TCP for every subagent (default: deny)"
    )
    mcp.add_argument("--max-concurrent-subagents", type=int, metavar="N")
    mcp.add_argument("--max-subagents-per-session", type=int, metavar="N")
    _add_trust_project(mcp)
    _add_ray(mcp)
    mcp.set_defaults(handler=_mcp)


def _mcp(args: argparse.Namespace) -> int:
    from ..config._config_files import load_settings
    from ..kernel import tune_collector
    from ._input import BadInputError, working_directory
    from ._mcp_command import McpServeRequest, mcp_command
    from ._mcp_http import is_loopback, parse_endpoint
    from ._trust import trust_gate

    endpoint = None
    token = os.environ.get("SUBVISOR_MCP_TOKEN") or None
    if args.http is not None:
        try:
            endpoint = parse_endpoint(args.http)
        except ValueError as exc:
            raise BadInputError(str(exc)) from None
        if not is_loopback(endpoint.host):
            if not args.allow_remote:
                raise BadInputError(
                    f"--http {args.http}: {endpoint.host} is not a loopback address; pass "
                    "--allow-remote (with a token in SUBVISOR_MCP_TOKEN) to serve beyond this "
                    "machine"
                )
            if token is None:
                raise BadInputError(
                    "--allow-remote needs a bearer token: set SUBVISOR_MCP_TOKEN (clients send "
                    "'Authorization: Bearer TOKEN')"
                )
    elif args.allow_remote:
        raise BadInputError("--allow-remote applies to --http only")
    cwd = working_directory(args.cwd)
    forced = {
        key: value
        for key, value in (("force_mode", args.sandbox), ("force_network", args.network))
        if value is not None
    }
    settings = load_settings(
        cwd,
        trust=trust_gate(args.trust_project),
        sandbox=forced or None,
        max_concurrent_subagents=args.max_concurrent_subagents,
        max_subagents_per_session=args.max_subagents_per_session,
        **_placement(args),
    )
    model = args.model or os.environ.get("SUBVISOR_MODEL") or settings.model or ""
    if not model:
        raise BadInputError(
            "no model configured: pass --model provider:model (for example openai:gpt-4o-mini "
            "or scripted:scenario.yaml), set SUBVISOR_MODEL, or put `model = ...` in "
            "$SUBVISOR_HOME/config.toml"
        )
    tune_collector()
    return mcp_command(
        McpServeRequest(
            model=model,
            cwd=cwd,
            settings=settings,
            endpoint=endpoint,
            token=token,
            approve=args.approve,
            ask_timeout_s=args.ask_timeout,
        )
    )


def _add_trust_project(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--trust-project",
        action="store_true",
        help="trust the project's .mcp.json and subvisor.toml servers and providers for this "
        "run only, without asking (for CI; see `subvisor trust`)",
    )


def _trust(args: argparse.Namespace) -> int:
    from ._trust import trust_command

    return trust_command(Path(args.path), list_trusted=args.list, revoke=args.revoke)


def _workflow_run(args: argparse.Namespace) -> int:
    from ..config._config_files import load_settings
    from ..kernel import tune_collector
    from ..workflow import WorkflowError
    from ._input import working_directory
    from ._trust import trust_gate
    from ._workflow import WorkflowRunRequest, parse_inputs, workflow_run_command

    cwd = working_directory(args.cwd)
    try:
        inputs = parse_inputs(args.input)
    except WorkflowError as exc:
        SafeConsole(stderr=True).print(f"[red]{quoted(str(exc))}[/]")
        return 2
    settings = load_settings(cwd, trust=trust_gate(args.trust_project), **_placement(args))
    tune_collector()
    return workflow_run_command(
        WorkflowRunRequest(
            script=Path(args.script),
            cwd=cwd,
            settings=settings,
            inputs=inputs,
            amend=args.amend,
            model=args.model,
            json=args.json,
        )
    )


def _workflow_show(args: argparse.Namespace) -> int:
    from ..config._config_files import load_settings
    from ..config._project_trust import TrustGate
    from ._input import working_directory
    from ._workflow import workflow_show_command

    settings = load_settings(working_directory("."), trust=TrustGate("leave-out"))
    return workflow_show_command(args.run_id, args.json, settings.home)


def _stress(args: argparse.Namespace) -> int:
    import contextlib
    import json

    from ..kernel import find_exception, tune_collector
    from ._interrupt import RunInterruptedError
    from ._run import wide_console
    from ._stress import FAULTS, StressOptions, progress_bar, run_stress
    from ._stress_report import check_report_path, missing_report_extra, write_report
    from ._stress_summary import stress_summary

    errors = SafeConsole(stderr=True)
    try:
        options = StressOptions(
            agents=args.agents,
            concurrency=args.concurrency,
            background_ratio=args.background_ratio,
            # Naming faults asks for them: every agent commits one unless a rate is given.
            fault_rate=(
                args.fault_rate if args.fault_rate is not None else 1.0 if args.faults else 0.0
            ),
            faults=tuple(f for f in (args.faults or ",".join(FAULTS)).split(",") if f),
            turns=args.turns,
            latency_ms=args.latency_ms,
            seed=args.seed,
            idle_timeout_s=args.idle_timeout,
            max_subagents_per_session=args.max_subagents_per_session,
            ray_address=args.ray,
        )
        report_paths = [check_report_path(Path(name)) for name in args.report]
    except ValueError as exc:
        errors.print(f"[red]{quoted(str(exc))}[/]")
        return 2
    if report_paths and (missing := missing_report_extra()):
        # Said now, so nobody waits for a report that will not come; the run goes on.
        errors.print(f"[yellow]{quoted(missing)}; running anyway, without the report[/]")
    live = not args.json and errors.is_terminal
    tune_collector()
    try:
        with progress_bar(errors) if live else contextlib.nullcontext() as on_progress:
            result = run_stress(options, on_progress)
    except BaseException as exc:
        interrupted = find_exception(exc, RunInterruptedError)
        if not isinstance(interrupted, RunInterruptedError):
            raise
        errors.print(f"[yellow]{quoted(str(interrupted))}: every subagent was stopped[/]")
        return interrupted.exit_code
    report = result.summary
    if args.json:
        sys.stdout.write(json.dumps(report, indent=2) + "\n")
    else:
        wide_console().print(stress_summary(report))
    code = 1 if report["lost"] or report["duplicates"] else 0
    for report_path in report_paths:
        try:
            write_report(result, report_path)
        except ImportError as exc:
            errors.print(f"[red]{quoted(str(exc))}[/]")
            return code or 2
        errors.print(f"report: {quoted(str(report_path))}", highlight=False)
    return code


def _top(args: argparse.Namespace) -> int:
    from ._top import top_command

    return top_command(args.session, args.page_size, SafeConsole(stderr=True))


def _agents(args: argparse.Namespace) -> int:
    from ._agents import agents_command
    from ._input import working_directory

    return agents_command(working_directory(args.cwd), args.json)


def _tasks(command: str, args: argparse.Namespace) -> int:
    from ._task_commands import background_command, logs_command, ps_command, stop_command

    if command == "ps":
        return ps_command(args.session, args.json)
    if command == "logs":
        return logs_command(args.task_id, args.follow)
    if command == "bg":
        return background_command(args.task_id)
    return stop_command(args.task_id)


#: Commands that start a supervisor, so refuse inside a worker tree.
_STARTS_A_SUPERVISOR = frozenset({"run", "demo", "stress", "workflow", "doctor", "mcp"})


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``subvisor`` console script."""
    from ..config._config_files import ConfigError
    from ..kernel import (
        NestedSupervisorError,
        PlacementError,
        disk_full_error,
        find_exception,
        refuse_inside_worker_tree,
        supervisor_marked,
    )
    from ._input import BadInputError, check_text_arguments

    args = build_parser().parse_args(argv)
    try:
        if args.command in _STARTS_A_SUPERVISOR:
            # Before any config is read or any file written (S-SEC-7).
            refuse_inside_worker_tree()
        check_text_arguments(args)
        # While it runs, what this process starts acts for a model (S-SEC-2).
        starts = args.command in _STARTS_A_SUPERVISOR
        with supervisor_marked() if starts else contextlib.nullcontext():
            code: int = args.handler(args)
    except (BadInputError, ConfigError, NestedSupervisorError) as exc:
        # One line, however narrow the terminal.
        SafeConsole(stderr=True).print(
            f"[red]{quoted(str(exc))}[/]", soft_wrap=True, highlight=False
        )
        return 2
    except BaseException as exc:
        # No Ray, or no cluster where --ray or placement said (S-DIST-1): one line too.
        placement = find_exception(exc, PlacementError)
        full = disk_full_error(exc)
        if placement is None and full is None:
            raise
        if placement is not None:
            line = str(placement)
        else:
            from ..state._paths import subvisor_home

            line = (
                f"no space left on the disk that holds {subvisor_home()} ({full}): a subagent "
                "may have filled it; free space there and run again (the next subvisor "
                "command marks the sessions this run left running as interrupted)"
            )
        SafeConsole(stderr=True).print(f"[red]{quoted(line)}[/]", soft_wrap=True, highlight=False)
        return 2
    return code
