"""``python -m benchmarks NAME [--json] [options]``; ``python -m benchmarks --list``."""

from __future__ import annotations

import argparse
import importlib
import json
import sys
from collections.abc import Callable, Mapping, Sequence

from supervisor.kernel import tune_collector

from . import BENCHMARKS, Report

Target = tuple[str, float]


def _format_table(name: str, report: Report, targets: Mapping[str, Target]) -> str:
    width = max(len(key) for key in report)
    lines = [name]
    for key, value in report.items():
        line = f"  {key:<{width}}  {value:>12}"
        target = targets.get(key)
        if target is not None:
            op, bound = target
            met = value <= bound if op == "<=" else value >= bound
            line += f"   target {op} {bound:g}: {'met' if met else 'MISSED'}"
        lines.append(line)
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks", description="subvisor's kernel benchmarks."
    )
    parser.add_argument("--list", action="store_true", help="list the benchmarks and exit")
    commands = parser.add_subparsers(dest="name", metavar="NAME")
    for bench in BENCHMARKS.values():
        module = importlib.import_module(bench.module)
        sub = commands.add_parser(bench.name, help=bench.summary, description=bench.summary)
        sub.add_argument("--json", action="store_true", help="print one JSON object")
        module.add_arguments(sub)
    args = parser.parse_args(argv)
    if args.list:
        width = max(len(name) for name in BENCHMARKS)
        for bench in BENCHMARKS.values():
            print(f"{bench.name:<{width}}  {bench.summary}")
        return 0
    if args.name is None:
        parser.print_usage(sys.stderr)
        return 2
    module = importlib.import_module(BENCHMARKS[args.name].module)
    run: Callable[[argparse.Namespace], Report] = module.run
    targets: Mapping[str, Target] = module.TARGETS
    # As the subvisor commands do before their event loop: the figures are theirs.
    tune_collector()
    report = run(args)
    if args.json:
        print(json.dumps(report))
    else:
        print(_format_table(args.name, report, targets))
    return 0


if __name__ == "__main__":
    sys.exit(main())
