"""``tune_collector``: start-up leaves the collector's walks, full collections come
further apart, and later garbage still goes.

Each test runs in a fresh interpreter: the collector's state is the
process's, and the test process must keep its own.
"""

from __future__ import annotations

from tests.support.fresh_python import run_fresh_python


def test_objects_alive_at_start_up_are_walked_by_no_later_collection() -> None:
    run_fresh_python(
        """
        import gc
        import supervisor.delegation  # the supervisor's stack, as a command imports it
        from supervisor.kernel import tune_collector

        walked_before = len(gc.get_objects())
        tune_collector()
        assert gc.get_freeze_count() >= walked_before * 0.9, (gc.get_freeze_count(), walked_before)
        assert len(gc.get_objects()) < walked_before * 0.01, len(gc.get_objects())
        """
    )


#: Tuned, then a cycle of two objects, ``a`` and ``b``, and ``gone``: a weak reference to ``a``.
A_CYCLE = """
import gc, weakref
from supervisor.kernel import tune_collector

tune_collector()

class Node:
    pass

a, b = Node(), Node()
a.other, b.other = b, a
gone = weakref.ref(a)
"""


def test_cyclic_garbage_made_after_freezing_is_still_collected() -> None:
    run_fresh_python(
        """
        del a, b
        assert gone() is not None  # a cycle: its reference counts never reach zero
        gc.collect()
        assert gone() is None
        """,
        prelude=A_CYCLE,
    )


def test_cyclic_garbage_in_the_oldest_generation_is_still_collected_unasked() -> None:
    """Spaced, not stopped: allocation alone still brings a full collection."""
    run_fresh_python(
        """
        gc.collect(1)  # it survives, still referenced, into the oldest generation
        full = []
        gc.callbacks.append(lambda phase, info: full.append(info["generation"] == 2))
        del a, b
        # A growing heap, as a fleet fanning out: only objects that stay count.
        kept = []
        for _ in range(2_000_000):
            if gone() is None:
                break
            kept.append([])
        assert gone() is None, "old cyclic garbage outlived 2 million new objects"
        assert any(full), "freed without a full collection?"
        """,
        prelude=A_CYCLE,
    )


def test_a_command_that_starts_a_supervisor_tunes_the_collector_first() -> None:
    """``subvisor stress`` (as run, demo, workflow run and mcp) tunes before its event loop."""
    run_fresh_python(
        """
        import contextlib, gc, io
        from supervisor.cli import main

        assert gc.get_freeze_count() == 0
        with contextlib.redirect_stdout(io.StringIO()):
            assert main(["stress", "--agents", "2", "--concurrency", "2", "--json"]) == 0
        assert gc.get_freeze_count() > 10_000, gc.get_freeze_count()
        assert gc.get_threshold()[2] > 10, gc.get_threshold()
        """
    )
