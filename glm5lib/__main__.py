"""``python -m glm5lib`` is the ``glm5`` command."""

import sys

from glm5lib.cli import main

sys.exit(main())
