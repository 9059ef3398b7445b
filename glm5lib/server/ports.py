"""Ports and addresses: a free port, whether one is taken (and by whom), the address to connect to."""

from __future__ import annotations

import errno
import socket
import sys

import psutil

from glm5lib.errors import ServerLaunchError

__all__ = ["LOOPBACK", "connect_host", "find_free_port", "port_in_use", "require_free_port"]

LOOPBACK = "127.0.0.1"


def find_free_port(host: str = LOOPBACK) -> int:
    """A TCP port nothing listens on right now (the OS picks it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


def port_in_use(host: str, port: int) -> bool:
    """Whether binding ``host:port`` fails because something holds it.

    Connections the last server on the port closed wait a minute in TIME_WAIT; servers bind
    with SO_REUSEADDR past them (uvicorn, aiohttp and http.server all do), so the probe does too:
    otherwise a server relaunched on its port right after a stop is refused for a minute.
    """
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        if sys.platform.startswith("linux"):
            # (on BSD and macOS the option also lets 127.0.0.1 bind beside a 0.0.0.0 listener,
            # which would read a taken port as free; there TIME_WAIT stays a refusal)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError as exc:
            return exc.errno in (errno.EADDRINUSE, errno.EACCES)
    return False


def _port_owner(port: int) -> str:
    """Who listens on ``port``, for the error message; empty when that cannot be seen."""
    try:
        for conn in psutil.net_connections(kind="tcp"):
            if conn.laddr and conn.laddr.port == port and conn.status == psutil.CONN_LISTEN and conn.pid:
                proc = psutil.Process(conn.pid)
                return f" (pid {conn.pid}: {' '.join(proc.cmdline()[:4])})"
    except (psutil.Error, OSError):
        pass
    return ""


def connect_host(host: str) -> str:
    """The address a client on this machine uses to reach a server bound to ``host``."""
    return LOOPBACK if host in ("0.0.0.0", "::", "localhost") else host


def require_free_port(host: str, port: int) -> None:
    """Raise ServerLaunchError (cause ``port_in_use``, naming the owner) when ``port`` is taken."""
    if port_in_use(connect_host(host), port):
        raise ServerLaunchError(
            f"port {port} on {host} is already in use{_port_owner(port)}; "
            "choose another port or leave port=None to get a free one",
            cause="port_in_use",
        )
