"""Attaching to a server someone else runs, and knowing which engine it is.

:func:`glm5lib.server.attach` reaches a server by URL knowing no engine; :func:`attach` here asks
the registry which engine answers there (:func:`glm5lib.engines.identify`) and, where that engine's
self-description holds its arguments (SGLang's and the stand-in's server info), reads them into
its configuration: the attached server's ``engine`` and ``config``.
"""

from __future__ import annotations

import os

from glm5lib import engines
from glm5lib import server as server_mod
from glm5lib.errors import ConfigError

__all__ = ["attach"]


def attach(base_url: str, api_key: str | None = None, *, log_path: str | os.PathLike[str] | None = None,
           timeout: float = 5.0) -> server_mod.AttachedServer:
    """:func:`glm5lib.server.attach`, with ``engine`` (the adapter's name; None where no engine
    answers as itself) and ``config`` (the engine's configuration read from what it says of
    itself; None where it says nothing of its arguments) filled in."""
    attached = server_mod.attach(base_url, api_key, log_path=log_path, timeout=timeout)
    try:
        adapter, info = engines.identify(attached.base_url, api_key, timeout)
    except ConfigError:
        return attached
    attached.engine = adapter.name
    if adapter.config_from_info is not None:
        attached.config = adapter.config_from_info(info)
    return attached
