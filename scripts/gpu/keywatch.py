"""Watch every process's command line for the API key in $GLM5_API_KEY while a GPU run goes on.

    python3 scripts/gpu/keywatch.py OUT_FILE &   (stop it with kill; it writes one line per hit, none if clean)

Reads /proc/*/cmdline once a second and records each process whose arguments hold the key (the key itself is
never written: only the pid, the program and the argument's position). The launcher passes SGLang's key in a
private --config file, so a clean run leaves OUT_FILE with only its header line.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path


def main() -> None:
    key = os.environ.get("GLM5_API_KEY", "").encode()
    if not key:
        raise SystemExit("GLM5_API_KEY is not set: nothing to watch for")
    out = Path(sys.argv[1])
    out.write_text(f"# processes whose command line held the API key (checked once a second from {time.ctime()})\n")
    seen: set[int] = set()
    while True:
        for pid, args in holders(key):
            if pid not in seen:
                seen.add(pid)
                with out.open("a") as f:
                    f.write(f"{time.ctime()} pid {pid} {args[0].decode(errors='replace')} arg "
                            f"{next(i for i, a in enumerate(args) if key in a)}\n")
        time.sleep(1.0)


def holders(key: bytes) -> list[tuple[int, list[bytes]]]:
    """(pid, argv) of every other process whose command line holds ``key``."""
    found = []
    for proc in Path("/proc").glob("[0-9]*"):
        try:
            args = (proc / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if int(proc.name) != os.getpid() and any(key in a for a in args):
            found.append((int(proc.name), args))
    return found


if __name__ == "__main__":
    main()
