"""``python -m glm5lib.sim``: run the stand-in SGLang server."""

from __future__ import annotations

import sys

from glm5lib.sim import main

if __name__ == "__main__":
    sys.exit(main())
