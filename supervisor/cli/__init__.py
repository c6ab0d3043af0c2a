"""The ``subvisor`` command line: every command, ``top``, the control channel, doctor, stress.

``main`` is the console script's entry (``subvisor = "supervisor.cli:main"``);
``python -m supervisor.cli`` runs it too. Each command lives in its own
module and is imported when it runs. A live ``subvisor run`` serves its
control channel (``_control``) to ``top``, ``ps``, ``logs``, ``stop`` and
``bg`` (``_control_client``). This is the top floor: it imports every room
below it, and nothing imports it.
"""

from ._main import main

__all__ = ["main"]
