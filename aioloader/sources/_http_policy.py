"""Which addresses ``HttpFetcher`` may connect to: public ones, plus an explicit allow list.

A URL list from the web can name any host, and a redirect can send a fetch anywhere:
to the machine itself (``127.0.0.1``), the cloud metadata service (``169.254.169.254``) or
a private network. So by default every address that is not globally routable is refused:
loopback, link-local, private, multicast, reserved and unspecified ones (IPv4 and IPv6).
An IPv6 address that carries an IPv4 address is judged by the IPv4 address it reaches:
IPv4-mapped (``::ffff:a.b.c.d``), 6to4 (``2002::/16``, the IPv4 in bits 16-48), NAT64
(``64:ff9b::/96``, the IPv4 in the last 32 bits) and Teredo (``2001::/32``, the client's
IPv4 is the bitwise NOT of the last 32 bits). So ``2002:7f00:1::1`` is refused as the
loopback address it embeds, and ``64:ff9b::5db8:d822`` (a public IPv4 through NAT64) passes.
The check runs on the resolved addresses of every hop, redirects included, and the
connection is opened to the address that was checked (no second lookup a rebinding DNS
server could answer differently).

``AddressPolicy(allow=["127.0.0.1", "10.0.0.0/8", "files.internal"])`` lets chosen
networks (CIDRs or single addresses) and host names through.
"""

from __future__ import annotations

import ipaddress
import socket
from collections.abc import Iterable, Sequence
from typing import Any

__all__ = ("AddressPolicy", "BlockedAddressError", "as_policy", "embedded_ipv4")

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address


class BlockedAddressError(OSError):
    """A host resolved only to addresses the ``AddressPolicy`` refuses."""


_NAT64 = ipaddress.IPv6Network("64:ff9b::/96")
_TEREDO = ipaddress.IPv6Network("2001::/32")
_SIXTOFOUR = ipaddress.IPv6Network("2002::/16")


def embedded_ipv4(address: IPAddress) -> tuple[str, ipaddress.IPv4Address] | None:
    """(form, IPv4 address) an IPv6 address carries and reaches, or None.

    The forms: ``"IPv4-mapped"``, ``"6to4"``, ``"NAT64"`` and ``"Teredo"`` (its client).
    """
    if not isinstance(address, ipaddress.IPv6Address):
        return None
    bits = int(address)
    if address.ipv4_mapped is not None:
        return "IPv4-mapped", address.ipv4_mapped
    if address in _SIXTOFOUR:
        return "6to4", ipaddress.IPv4Address((bits >> 80) & 0xFFFFFFFF)
    if address in _NAT64:
        return "NAT64", ipaddress.IPv4Address(bits & 0xFFFFFFFF)
    if address in _TEREDO:
        return "Teredo", ipaddress.IPv4Address(~bits & 0xFFFFFFFF)
    return None


def _kind(address: IPAddress) -> str | None:
    """Why ``address`` is not public (None when it is)."""
    embedded = embedded_ipv4(address)
    if embedded is not None:
        form, ipv4 = embedded
        kind = _kind(ipv4)
        return None if kind is None else f"{kind} ({form}, embeds {ipv4})"
    checks = (
        ("unspecified", address.is_unspecified),
        ("loopback", address.is_loopback),
        ("link-local", address.is_link_local),
        ("multicast", address.is_multicast),
        ("reserved", address.is_reserved),
        ("private", address.is_private),
        ("reserved", not address.is_global),
    )
    return next((f"{name} address" for name, hit in checks if hit), None)


LITERALS_KEPT = 4096
"""Hosts whose ``literal_refusal`` an ``AddressPolicy`` remembers at once."""
_UNKNOWN = object()


class AddressPolicy:
    """Refuses non-public addresses except those allowed.

    Args:
        allow: Networks (``"10.0.0.0/8"``), addresses (``"127.0.0.1"``, ``"::1"``) and
            host names (``"localhost"``: any address it resolves to) let through.
    """

    def __init__(self, allow: Iterable[str] = ()) -> None:
        if isinstance(allow, str):
            raise TypeError(f"allow must be a sequence of CIDRs or hosts but got the str {allow!r}")
        networks: list[ipaddress.IPv4Network | ipaddress.IPv6Network] = []
        hosts: set[str] = set()
        for entry in allow:
            if not isinstance(entry, str) or not entry.strip():
                raise ValueError(f"allow entries must be CIDRs or host names but got {entry!r}")
            try:
                networks.append(ipaddress.ip_network(entry.strip(), strict=False))
            except ValueError:
                hosts.add(entry.strip().lower().rstrip("."))
        self.networks = tuple(networks)
        self.hosts = frozenset(hosts)
        self._literals: dict[str, str | None] = {}  # host -> literal_refusal, bounded

    def __repr__(self) -> str:
        allowed = [str(n) for n in self.networks] + sorted(self.hosts)
        return f"AddressPolicy(allow={allowed!r})"

    def refusal(self, host: str, address: str) -> str | None:
        """Why connecting to ``address`` (resolved from ``host``) is refused, or None."""
        if host.lower().rstrip(".") in self.hosts:
            return None
        try:
            ip = ipaddress.ip_address(address.split("%", 1)[0])
        except ValueError:
            return f"{address!r} is not an IP address"
        embedded = embedded_ipv4(ip)
        candidates = (ip,) if embedded is None else (ip, embedded[1])
        if any(each in network for each in candidates for network in self.networks):
            return None
        kind = _kind(ip)
        return None if kind is None else f"{host} -> {ip} is a {kind}"

    def literal_refusal(self, host: str) -> str | None:
        """``refusal`` for a host that is an IP literal; None for names (checked once resolved).

        Remembered per host (a job fetches many URLs of few hosts), up to ``LITERALS_KEPT``.
        """
        known = self._literals.get(host, _UNKNOWN)
        if known is not _UNKNOWN:
            return known  # type: ignore[return-value]
        bare = host.strip("[]")
        try:
            ipaddress.ip_address(bare.split("%", 1)[0])
        except ValueError:
            refused = None
        else:
            refused = self.refusal(bare, bare)
        if len(self._literals) >= LITERALS_KEPT:
            self._literals.clear()
        self._literals[host] = refused
        return refused

    def allowed(self, host: str, addresses: Sequence[str]) -> list[str]:
        """The ``addresses`` of ``host`` it may connect to; raises when none is left."""
        kept = [address for address in addresses if self.refusal(host, address) is None]
        if not kept:
            reasons = [self.refusal(host, address) for address in addresses[:3]]
            raise BlockedAddressError(
                "; ".join(r for r in reasons if r) or f"{host} resolved to no address"
            )
        return kept


def as_policy(value: Any) -> AddressPolicy:
    """An ``AddressPolicy`` from one, or from an allow list (None: the default policy)."""
    if isinstance(value, AddressPolicy):
        return value
    return AddressPolicy(() if value is None else value)


async def resolve(host: str, port: int) -> list[tuple[int, str]]:
    """(family, address) pairs of ``host`` via ``getaddrinfo`` on a worker thread."""
    import anyio

    infos = await anyio.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    seen: list[tuple[int, str]] = []
    for family, _, _, _, sockaddr in infos:
        pair = (int(family), str(sockaddr[0]))
        if pair not in seen:
            seen.append(pair)
    return seen
