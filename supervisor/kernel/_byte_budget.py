"""``ByteBudget``: the bytes all of a supervisor's workers may make it hold (S-SEC-8).

Each ``WorkerHandle`` caps what its own worker's requests hold
(``ANSWERING_FRAMES``), but that cap is per worker: twenty hostile workers
each sending frame-sized requests made the supervisor hold twenty times it.
This budget is shared by every handle of one ``Supervisor``; each handle
charges its ``ByteAccount`` with:

- the frame it is reading, before reading its body: once a frame's header is
  buffered and the rest has not arrived, its whole size is taken here (waiting:
  the reader reads no more of that worker's pipe meanwhile, so the pipe fills
  and the worker blocks, the same backpressure as the per-worker cap); released
  once the frame is dispatched, or kept by a worker request for its answer;
- a worker request read whole in one read (at most a read's size), the same way,
  when it is admitted;
- an answer's frame, without waiting (it exists by then), until it is written.

Invariants:

- Every account has a reserve of one frame (``max_frame_size``) of its own:
  what it holds up to it is never waited for and never counted in the shared
  pool. Past it, it draws on the pool of ``capacity`` bytes, shared by all.
- Only what exceeds each reserve counts in the pool, so the pool is exactly
  ``sum(max(0, held - reserve))`` over the accounts. Takes keep it within
  ``capacity`` unless it was empty (a take larger than the whole pool is then
  granted alone, so no legal frame waits for ever); charges that do not wait
  (answers) may pass it by what they charge. What the supervisor holds for all
  its workers is thus at most ``capacity`` + one frame per worker + the
  answers being written (one per worker at a time, ``_handle``).
- Liveness: a worker holding no more than a frame never waits on the pool,
  however much of it other workers hold, and for however long. A smaller
  reserve lets a few workers whose requests are held for long (a permission
  check waiting for a person, a slow model call) pin the pool, and then every
  other worker's next large frame (a model call with a long transcript) waits
  for them: one frame each is the least that keeps every worker going.
- Fairness past the reserve: takes that need the pool are granted in arrival
  order (FIFO), and a new take never passes one that waits, so a large frame
  cannot be starved by a stream of smaller ones either: it waits only for the
  bytes held when it arrived to be released, and each is released once its
  answer is written, its worker ends, or the watchdog stops a worker that
  stopped reading (``write_stall_s``). A worker has at most one take waiting
  (only its reader takes), so the queue holds at most one entry per worker.
- Races: all of it runs on the trio thread. A take checks and charges with no
  await in between; a release grants waiting takes, in order, before anything
  else runs, charging them at once (the waiter is only woken), so bytes freed
  are never claimed twice. A take cancelled after it was granted gives its bytes
  back (``take``'s ``except``).
"""

from __future__ import annotations

from collections import deque

import trio

__all__ = ["FLEET_ANSWERING_FRAMES", "ByteAccount", "ByteBudget"]

#: The pool, in frames of ``max_frame_size`` (``SupervisorConfig.fleet_answering_frames``'s
#: default): 4 frames, 32 MiB, past the frame each worker holds of its own. An
#: honest worker rarely holds more than a frame (one model call at a time, whose
#: transcript is a few hundred KB to a few MB); before, each worker could make
#: the supervisor hold three (``ANSWERING_FRAMES`` plus the request its reader
#: stopped at: 24 MiB a worker, ~0.5 GiB for 20 of them).
FLEET_ANSWERING_FRAMES = 4


class _Take:
    __slots__ = ("account", "done", "granted", "size")

    def __init__(self, account: ByteAccount, size: int) -> None:
        self.account = account
        self.size = size
        self.granted = False
        self.done = trio.Event()


class ByteBudget:
    """The pool of ``capacity`` bytes all workers' accounts draw on past their ``reserve``."""

    def __init__(self, capacity: int, *, reserve: int) -> None:
        self.capacity = capacity
        self.reserve = reserve
        #: Bytes held past the reserves, over all accounts.
        self.pool = 0
        self._waiting: deque[_Take] = deque()

    def account(self) -> ByteAccount:
        """A new account (one per worker) on this budget."""
        return ByteAccount(self)

    @property
    def waiting(self) -> int:
        """Takes waiting for the pool."""
        return len(self._waiting)

    def _pool_delta(self, account: ByteAccount, size: int) -> int:
        """How much the pool grows if ``account`` holds ``size`` bytes more (or less)."""
        reserve = self.reserve
        return max(0, account.held + size - reserve) - max(0, account.held - reserve)

    def _grant(self) -> None:
        """Grant waiting takes in arrival order, while the first fits."""
        waiting = self._waiting
        while waiting:
            take = waiting[0]
            delta = self._pool_delta(take.account, take.size)
            if delta and self.pool and self.pool + delta > self.capacity:
                return
            waiting.popleft()
            take.account._add(take.size, delta)
            take.granted = True
            take.done.set()


class ByteAccount:
    """One worker's bytes on a ``ByteBudget``."""

    def __init__(self, budget: ByteBudget) -> None:
        self.budget = budget
        #: Bytes this account holds (its reserve's included).
        self.held = 0

    def _add(self, size: int, delta: int) -> None:
        self.held += size
        self.budget.pool += delta

    @property
    def waiting(self) -> bool:
        """True while a take of this account waits for the pool."""
        return any(take.account is self for take in self.budget._waiting)

    async def take(self, size: int) -> None:
        """Hold ``size`` more bytes, first waiting for the pool if they need it.

        Returns without a checkpoint when granted at once.
        """
        budget = self.budget
        delta = budget._pool_delta(self, size)
        pool = budget.pool
        if not delta or (not budget._waiting and (not pool or pool + delta <= budget.capacity)):
            self._add(size, delta)
            return
        take = _Take(self, size)
        budget._waiting.append(take)
        try:
            await take.done.wait()
        except BaseException:
            if take.granted:
                self.release(size)
            else:
                budget._waiting.remove(take)
                # It may have been the first in line, holding the others back.
                budget._grant()
            raise

    def charge(self, size: int) -> None:
        """Hold ``size`` more bytes without waiting (what already exists)."""
        self._add(size, self.budget._pool_delta(self, size))

    def release(self, size: int) -> None:
        """Give back ``size`` bytes, granting the takes that waited for them."""
        budget = self.budget
        self._add(-size, budget._pool_delta(self, -size))
        if budget._waiting:
            budget._grant()
