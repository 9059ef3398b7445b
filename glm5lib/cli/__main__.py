"""``python -m glm5lib.cli``: the ``glm5`` command where its console script is not installed."""

from __future__ import annotations

import sys

from glm5lib.cli import main

sys.exit(main())
