"""HTTP to an inference server's small endpoints: one GET with one error semantics.

The streaming load goes through aiohttp (:mod:`glm5lib.loadgen`); everything else glm5lib asks a
server (``/health``, ``/get_server_info``, ``/metrics``, the stand-in's ``/sim/gpus``) is a short
blocking GET, made here:

* :func:`get` never raises for the network: a server that cannot be reached answers status 0
  with the reason in :attr:`Response.error`; an HTTP error keeps its status and body;
* :func:`get_json` parses a 200 answer's JSON, or returns None;
* :func:`server_info` reads ``/get_server_info`` (``/server_info`` on releases that renamed it),
  secrets masked.
"""

from __future__ import annotations

import json
import logging
import urllib.error
import urllib.request
from dataclasses import dataclass
from typing import Any

from glm5lib.errors import ConfigError
from glm5lib.masking import mask_mapping

__all__ = ["SERVER_INFO_PATHS", "Response", "check_api_key", "get", "get_json", "server_info"]

log = logging.getLogger(__name__)

#: Where SGLang serves its resolved arguments and runtime state, newest name first tried.
SERVER_INFO_PATHS = ("/get_server_info", "/server_info")


@dataclass(frozen=True)
class Response:
    """What a GET got: ``status`` 0 means no HTTP answer at all (``error`` says why)."""

    url: str
    status: int
    body: bytes = b""
    error: str | None = None

    @property
    def ok(self) -> bool:
        return self.status == 200

    @property
    def reached(self) -> bool:
        """True when the server answered at all (any HTTP status)."""
        return self.status != 0

    def text(self) -> str:
        return self.body.decode("utf-8", errors="replace")

    def json(self) -> Any:
        """The body as JSON; ValueError when it is not."""
        return json.loads(self.body)

    def describe(self) -> str:
        """One phrase for messages: ``answered HTTP 404`` or ``could not be reached (...)``."""
        if self.status == 0:
            return f"could not be reached ({self.error})"
        return f"answered HTTP {self.status}"


def check_api_key(key: str | None, source: str = "the API key") -> None:
    """Refuse, before anything starts, an API key no HTTP request can carry: it travels in an
    ``Authorization: Bearer`` header, which holds printable ASCII without spaces, so a key with an
    accented letter or a space is refused by every server (and the server would answer 401 to the key
    it was launched with). The message names ``source`` and the character's position, never the key."""
    if not key:
        return
    for i, ch in enumerate(key):
        if not "!" <= ch <= "~":
            what = "a space" if ch == " " else ("a control character" if ord(ch) < 32 or ord(ch) == 127
                                                 else f"the non-ASCII character U+{ord(ch):04X}")
            raise ConfigError(f"{source} holds {what} at position {i + 1}: a key travels in an HTTP "
                              "Authorization header, which carries printable ASCII without spaces "
                              "(letters, digits and punctuation such as - . _ ~ + / = # :)", field="api_key")


def _url(base_url: str, path: str) -> str:
    if not path:
        return base_url
    return base_url.rstrip("/") + "/" + path.lstrip("/")


def get(base_url: str, path: str = "", *, api_key: str | None = None, timeout: float = 5.0) -> Response:
    """GET ``base_url + path`` with the API key as a bearer token; never raises for the network."""
    url = _url(base_url, path)
    request = urllib.request.Request(url)
    if api_key:
        request.add_header("Authorization", f"Bearer {api_key}")
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            return Response(url, response.status, response.read())
    except urllib.error.HTTPError as exc:
        try:
            body = exc.read() if exc.fp is not None else b""
        except OSError:
            body = b""
        return Response(url, exc.code, body, error=str(exc.reason))
    except (urllib.error.URLError, OSError, TimeoutError, ValueError) as exc:
        reason = getattr(exc, "reason", None) or exc
        return Response(url, 0, b"", error=str(reason) or type(exc).__name__)


def get_json(base_url: str, path: str = "", *, api_key: str | None = None, timeout: float = 5.0) -> Any | None:
    """The JSON of a 200 answer, or None (unreachable, HTTP error, not JSON)."""
    response = get(base_url, path, api_key=api_key, timeout=timeout)
    if not response.ok or not response.body:
        return None
    try:
        return response.json()
    except ValueError:
        log.debug("%s did not return JSON", response.url)
        return None


def server_info(base_url: str, *, api_key: str | None = None, timeout: float = 5.0) -> dict[str, Any]:
    """``/get_server_info`` (or ``/server_info``) as a dict with secrets masked; {} when neither answers."""
    for path in SERVER_INFO_PATHS:
        data = get_json(base_url, path, api_key=api_key, timeout=timeout)
        if isinstance(data, dict):
            return mask_mapping(data)
    return {}
