"""``python -m supervisor.cli``: the ``subvisor`` command."""

import sys

from ._main import main

sys.exit(main())
