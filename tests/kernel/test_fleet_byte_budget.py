"""S-SEC-8: hostile workers together cannot make the supervisor hold more than its fleet budget.

Real workers: each hog is asked (``ask_supervisor``) to send the supervisor echo
requests of almost a whole frame, which its handler holds unanswered. Each
worker's own cap (``ANSWERING_FRAMES``) bounds one hog; the fleet's budget
(``_byte_budget``) bounds them all together, and a sibling's large request is
still answered meanwhile.
"""

from __future__ import annotations

import ctypes
import os

import psutil
import trio

from protocol import KERNEL_ASK_SUPERVISOR, EchoParams, EchoResult, FrameLimits, WorkerRequest
from supervisor import Supervisor, WorkerHandle

_LIBC = ctypes.CDLL("libc.so.6")


def _rss() -> int:
    """This process's resident memory, once malloc gave back what it freed."""
    _LIBC.malloc_trim(0)
    return int(psutil.Process(os.getpid()).memory_info().rss)


async def test_s_sec_8_twenty_hostile_workers_hold_about_the_fleet_budget_of_the_supervisor() -> (
    None
):
    """S-SEC-8: 20 workers each trying to have 4 frame-sized echo requests held grow
    the supervisor by a frame each and the fleet's pool, not by the three frames each
    per-worker caps allow (measured before: ~490 MiB); a sibling's frame-sized echo is
    answered while the hogs hold it all, and every request is answered once the
    handler lets go."""
    frame = FrameLimits().max_frame_size
    value, hogs, per_hog = "x" * (frame - 1024), 20, 4
    started: dict[str, int] = {}
    release = trio.Event()

    async def held(handle: WorkerHandle, request: WorkerRequest) -> EchoResult:
        asked = request.params.value  # type: ignore[attr-defined]
        if len(asked) > 1024:
            started[handle.worker_id] += 1
            await release.wait()
        return EchoResult(value=asked)

    async def prompt(handle: WorkerHandle, request: WorkerRequest) -> EchoResult:
        return EchoResult(value=request.params.value)  # type: ignore[attr-defined]

    answered = 0

    async def ask(handle: WorkerHandle) -> None:
        nonlocal answered
        assert (await handle.request(KERNEL_ASK_SUPERVISOR, EchoParams(value=value))).value == value
        answered += 1

    async with Supervisor() as sup:
        budget = sup.config.fleet_answering_frames * frame
        fleet = [await sup.spawn(handler=held) for _ in range(hogs)]
        sibling = await sup.spawn(handler=prompt)
        for handle in fleet:
            started[handle.worker_id] = 0
        before = _rss()
        with trio.fail_after(120):  # a hang guard, not a measure
            async with trio.open_nursery() as nursery:
                sent = 0
                for hog in fleet:
                    # One at a time, until the supervisor holds it or stops reading it:
                    # an ask sent to a worker blocked on its pipe would be held by us.
                    for asked in range(per_hog):
                        nursery.start_soon(ask, hog)
                        sent += 1
                        while started[hog.worker_id] <= asked and not hog.reading_paused:  # noqa: ASYNC110
                            await trio.sleep(0.01)
                        if hog.reading_paused:
                            break
                await trio.sleep(0.5)  # what is in flight settles
                grown = _rss() - before
                # A sibling's frame-sized request (a model call with a long transcript)
                # is answered while the hogs hold the pool for as long as they like.
                large = "y" * (frame - 1024)
                echoed = await sibling.request(KERNEL_ASK_SUPERVISOR, EchoParams(value=large))
                assert echoed.value == large
                assert sum(started.values()) < sent
                release.set()
        assert answered == sent
        for handle in (*fleet, sibling):
            await handle.shutdown()
    print(f"supervisor grew {grown / 2**20:.0f} MiB for {hogs} hogs (budget {budget / 2**20:.0f})")
    # The pool, a frame (its reserve) and a read's partial frame per worker, and slack
    # for the allocator; before, each hog held two admitted requests and the one it
    # stopped at: three frames.
    assert grown < budget + hogs * (frame + 2**20) + 32 * 2**20, grown
    assert grown < hogs * 2 * frame, grown
