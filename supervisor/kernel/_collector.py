"""``tune_collector``: the cyclic garbage collector's settings for a process that hosts a fleet.

A supervisor at fleet scale holds ~190k objects that the cyclic garbage
collector tracks, and a third of them were made by start-up: modules,
classes, functions, the config. They live as long as the process, yet each
full collection walked them all again, with the event loop stopped:
launches, approvals and streamed text all waited.

Two settings, both measured in the relay benchmark at 500 agents:

- **Freeze start-up** (``gc.freeze``): what start-up made is left out of
  every later collection. The longest full collection went from 136-207 ms
  of CPU to 84-106 ms (four runs).
- **Space the full collections** (``OLDEST_THRESHOLD``, not CPython's 10).
  While a fleet fans out, the heap grows by a quarter again and again, and
  CPython collects everything each time it has (after every 10 collections
  of the middle generation): one to three full collections in the root's
  turn, the longest 65-211 ms of CPU, each a stall of the loop. Spaced ten
  times further apart, none came in six runs (the longest collection 10-25
  ms), and the collector's CPU in all went from 0.28-0.40 s to 0.14-0.22 s.
  Cyclic garbage that reached the oldest generation waits longer for its
  collection, so the memory may hold more of it meanwhile: the supervisor's
  peak RSS was 111-113 MiB either way.

A larger youngest generation (20000 allocations, not 700) saved another 0.1
s but made each young collection up to 24 ms of CPU instead of 8, a pause
every few hundred milliseconds: not kept.

This is process-wide state, which a library must not set behind its
host's back: the ``subvisor`` commands, the gateway's processes and the
benchmarks call it before their event loop, and a harness that hosts a
``Subvisor`` may call it too.
"""

from __future__ import annotations

import gc

__all__ = ["OLDEST_THRESHOLD", "tune_collector"]

#: Collections of the middle generation between two full collections (CPython: 10).
OLDEST_THRESHOLD = 100


def tune_collector() -> None:
    """Collect once, freeze every object alive now, and space the full collections.

    Call it when start-up is done (imports, config), before the event loop.
    Cyclic garbage made later is still collected, the oldest generation's
    ``OLDEST_THRESHOLD`` times less often; only objects alive now are kept
    for good. Calling it again freezes what was made since.
    """
    gc.collect()
    gc.freeze()
    young, middle, _ = gc.get_threshold()
    gc.set_threshold(young, middle, OLDEST_THRESHOLD)
