"""The client's address, for the login lockout (django-axes) and the per-address rate limits
(django-ratelimit): one definition for both."""

from __future__ import annotations

import ipaddress

from django.conf import settings
from django.http import HttpRequest


def client_ip(request: HttpRequest) -> str:
    """``REMOTE_ADDR``, or behind ``TRUSTED_PROXY_COUNT`` proxies the address the outermost of them
    saw: each appends the address it was reached from to X-Forwarded-For, so it is that many entries
    from the right (those to its left were written by the client and prove nothing). A request with
    fewer entries did not come through the proxies: its own address it is."""
    remote = request.META.get("REMOTE_ADDR", "")
    count = settings.TRUSTED_PROXY_COUNT
    if not count:
        return remote
    forwarded = [part.strip() for part in request.META.get("HTTP_X_FORWARDED_FOR", "").split(",")]
    if len(forwarded) < count or not forwarded[-count]:
        return remote
    try:
        return str(ipaddress.ip_address(forwarded[-count]))
    except ValueError:
        return remote


def counted_address(address: str) -> str:
    """The address a limit per client counts ``address`` under: an IPv4 address as it is, an IPv6 one
    as its /64 network (``RATELIMIT_IPV6_MASK``), which one connection holds whole, as django-ratelimit
    counts it for the limits per address it keeps. An address that is none (empty) is left as it is."""
    try:
        ip = ipaddress.ip_address(address)
    except ValueError:
        return address
    if ip.version == 4:
        return str(ip)
    mask = getattr(settings, "RATELIMIT_IPV6_MASK", 64)
    return str(ipaddress.ip_network(f"{ip}/{mask}", strict=False).network_address)
