"""Which hosts a web or S3 source may reach: public addresses only, unless the operator names a
host (`RAGBUS_SOURCE_PRIVATE_HOSTS`: an intranet wiki, a local S3 server). A tenant's source
must never make the sources workers fetch from the machine's own services (Redis, NATS's
monitoring, a cloud's metadata address).

Checked when a source is declared, and again before every request a sync makes (a name that
resolved to a public address then may resolve elsewhere later). A name that resolves anew
between this check and the connection (DNS rebinding within the same second) is not caught
here: an operator who fears it runs the sources workers where only the public network is
reachable.
"""

from __future__ import annotations

import ipaddress
import socket
from collections.abc import Sequence
from urllib.parse import urlsplit


class HostRefused(ValueError):
    """A URL a source may not reach, said plainly."""


def _named(host: str, port: int | None, allowed: Sequence[str]) -> bool:
    names = {host.lower(), f"{host.lower()}:{port}" if port else host.lower()}
    return any(entry.lower() in names for entry in allowed)


def check_url(url: str, allowed_private: Sequence[str] = ()) -> None:
    """`HostRefused` unless `url` is http(s) and its host resolves to public addresses only
    (or is one the operator allowed)."""
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise HostRefused(f"{url!r} is not an http(s) URL with a host")
    host = parts.hostname
    if _named(host, parts.port, allowed_private):
        return
    try:
        found = socket.getaddrinfo(host, parts.port or 443, proto=socket.IPPROTO_TCP)
    except OSError as exc:
        raise HostRefused(f"{host} does not resolve ({exc.strerror or exc})") from exc
    for *_, address in found:
        ip = ipaddress.ip_address(address[0])
        if not ip.is_global or ip.is_multicast:
            raise HostRefused(
                f"{host} resolves to {ip}, not a public address: sources reach private hosts "
                "only where the operator names them (RAGBUS_SOURCE_PRIVATE_HOSTS)"
            )
