"""Finding the processes of one supervisor tree, and waiting for them to go."""

from __future__ import annotations

import os
import time


def processes_in_tree(tree_id: str) -> list[int]:
    """Pids of live (non-zombie) processes whose environment has ``SUBVISOR_TREE=tree_id``.

    A process already killed is not listed even while the kernel is still
    tearing it down (its environment is unreadable from the kill on; its fds
    close only later): to wait until one is reaped, poll its pid instead.
    """
    needle = f"SUBVISOR_TREE={tree_id}".encode()
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as f:
                state = f.read().rsplit(b")", 1)[1].split()[0]
            if state == b"Z":
                continue
            with open(f"/proc/{entry}/environ", "rb") as f:
                if needle in f.read().split(b"\0"):
                    found.append(int(entry))
        except (FileNotFoundError, ProcessLookupError, PermissionError, IndexError):
            continue
    return found


def wait_until_tree_gone(tree_id: str, timeout: float) -> list[int]:
    """Poll until no process of the tree is left or ``timeout`` passes; return the survivors."""
    deadline = time.monotonic() + timeout
    while True:
        left = processes_in_tree(tree_id)
        if not left or time.monotonic() >= deadline:
            return left
        time.sleep(0.02)


def zombie_children(pid: int) -> list[int]:
    """Children of ``pid`` that are zombies (exited but never reaped)."""
    import psutil

    try:
        children = psutil.Process(pid).children()
    except psutil.NoSuchProcess:
        return []
    return [c.pid for c in children if c.status() == psutil.STATUS_ZOMBIE]


def open_fds() -> set[int]:
    """This process's open file descriptors."""
    return {int(fd) for fd in os.listdir("/proc/self/fd")}
