"""``python -m supervisor.cli``: the ``subvisor`` command."""

import os
import sys

# ``-m`` put the working directory first on the path: the project, which a
# workspace-write subagent may write. A module it planted there must not
# shadow one imported later (lazily: the MCP SDK, textual, Ray), as it would
# for the ``subvisor`` script, whose path starts with its own directory.
if sys.path and sys.path[0] in ("", os.getcwd()):
    del sys.path[0]

from ._main import main

sys.exit(main())
