"""subvisor's benchmarks: ``python -m benchmarks NAME [--json]``.

Each benchmark is one module with ``add_arguments(parser)`` and
``run(args) -> Report``; ``python -m benchmarks --list`` names them. This
package stays import-light on purpose: child processes that the benchmarks
start (``multiprocessing`` children, the raw-pipe peer) import it, and they
must pay only for the stack they are meant to measure.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["BENCHMARKS", "Benchmark", "Report"]

#: One benchmark's result: flat, JSON-ready, every value a number.
Report = dict[str, float | int]


@dataclass(frozen=True, slots=True)
class Benchmark:
    """A benchmark's name, the module that implements it, and what it measures."""

    name: str
    module: str
    summary: str


BENCHMARKS: dict[str, Benchmark] = {
    b.name: b
    for b in (
        Benchmark(
            "spawn",
            "benchmarks._spawn",
            "spawn-to-ready latency: zygote vs exec vs multiprocessing forkserver/spawn",
        ),
        Benchmark(
            "roundtrip",
            "benchmarks._roundtrip",
            "request/response latency: WorkerHandle.request vs raw os.pipe vs multiprocessing.Pipe",
        ),
        Benchmark(
            "memory",
            "benchmarks._memory",
            "USS of idle zygote-forked workers (and of exec'd ones, for comparison)",
        ),
        Benchmark(
            "crash",
            "benchmarks._crash",
            "SIGKILL of a worker to its WorkerExit at the supervisor",
        ),
        Benchmark(
            "delegate",
            "benchmarks._delegate",
            "N scripted subagents through the Agent tool: wall time beyond scripted latency",
        ),
        Benchmark(
            "mcp",
            "benchmarks._mcp",
            "latency an Agent call gains through `subvisor mcp` (stdio) over a library call",
        ),
        Benchmark(
            "relay",
            "benchmarks._relay",
            "N subagents streaming answers from a local server: CPU per chunk, lag, stream time",
        ),
        Benchmark(
            "scale",
            "benchmarks._scale",
            "N idle zygote workers spawned at once: time to all ready, supervisor RSS",
        ),
        Benchmark(
            "ray",
            "benchmarks._ray",
            "workers on 3 Ray nodes vs local and vs Ray actors: spawn, round trip, USS, agents/s",
        ),
    )
}
