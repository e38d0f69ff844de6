"""The SSRF guard: pushes go only to public addresses, or to networks an operator allowed.

Every address a host resolves to is checked, and the connection is made only to the checked
addresses (the resolver hands aiohttp exactly those, so a second, different DNS answer can never
be used: no DNS rebinding). An address is refused when it is not globally routable (loopback,
RFC 1918 private, CGNAT 100.64/10, link-local including the 169.254.169.254 metadata service,
unique-local fc00::/7, documentation and benchmarking ranges, unspecified, reserved) or is
multicast; IPv6 forms that embed an IPv4 address (IPv4-mapped ``::ffff:a.b.c.d``, NAT64
``64:ff9b::/96``, 6to4, Teredo) are judged by the IPv4 address they carry. Numeric host forms
(``2130706433``, ``0x7f.1``, ``0177.0.0.1``) resolve through the system resolver to the address
they mean and are judged by that. ``EMQ_PUSH_ALLOW_CIDRS`` overrides the refusal for the listed
networks (a local sink in development, a partner's private link).

If any address of a host is refused the whole host is refused: a host that resolves to one
public and one private address is an attack more often than a mistake.
"""

from __future__ import annotations

import asyncio
import ipaddress
import socket
from collections.abc import Sequence

from aiohttp.abc import AbstractResolver, ResolveResult

from emq.core.errors import DestinationRefused

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network
_NAT64 = ipaddress.ip_network("64:ff9b::/96")


def _embedded_v4(ip: ipaddress.IPv6Address) -> ipaddress.IPv4Address | None:
    if ip.ipv4_mapped is not None:
        return ip.ipv4_mapped
    if ip in _NAT64:
        return ipaddress.IPv4Address(int(ip) & 0xFFFFFFFF)
    if ip.sixtofour is not None:
        return ip.sixtofour
    if ip.teredo is not None:
        return ip.teredo[1]
    return None


class AddressPolicy:
    """Decides whether one IP address may be pushed to."""

    def __init__(self, allow: Sequence[IPNetwork] = ()) -> None:
        self.allow = tuple(allow)

    def refusal(self, ip: IPAddress) -> str | None:
        """Why ``ip`` is refused, or ``None`` if it may be used."""
        if any(ip.version == net.version and ip in net for net in self.allow):
            return None
        if isinstance(ip, ipaddress.IPv6Address):
            inner = _embedded_v4(ip)
            if inner is not None:
                reason = self.refusal(inner)
                return f"{ip} embeds {reason}" if reason else None
        if ip.is_multicast:
            return f"{ip} is a multicast address"
        if not ip.is_global:
            return f"{ip} is not a public address (loopback, private, link-local or reserved)"
        return None

    def check_host(self, host: str) -> None:
        """Refuse an IP-literal host at once (aiohttp does not resolve literals).

        Legacy numeric forms (``2130706433``, ``0177.0.0.1``, ``127.1``) are judged by the
        address the C library reads into them, and refused even when that address is allowed:
        nobody writes them except to slip past a filter.
        """
        try:
            ip: IPAddress = ipaddress.ip_address(host.strip("[]"))
        except ValueError:
            try:
                legacy = ipaddress.IPv4Address(socket.inet_aton(host))
            except OSError:
                return  # a name: the resolver checks what it resolves to
            raise DestinationRefused(
                f"destination refused: {host!r} is a non-canonical IPv4 form of {legacy}"
            ) from None
        reason = self.refusal(ip)
        if reason:
            raise DestinationRefused(f"destination refused: {reason}")


class GuardedResolver(AbstractResolver):
    """Resolves with the system resolver (in a thread) and lets only allowed addresses through."""

    def __init__(self, policy: AddressPolicy) -> None:
        self._policy = policy

    async def resolve(
        self, host: str, port: int = 0, family: socket.AddressFamily = socket.AF_INET
    ) -> list[ResolveResult]:
        loop = asyncio.get_running_loop()
        try:
            infos = await loop.getaddrinfo(host, port, type=socket.SOCK_STREAM, family=family)
        except socket.gaierror as e:
            raise OSError(e.errno, f"cannot resolve {host}: {e.strerror}") from e
        results: list[ResolveResult] = []
        for fam, _, proto, _, sockaddr in infos:
            address = str(sockaddr[0])
            reason = self._policy.refusal(ipaddress.ip_address(address.split("%")[0]))
            if reason:
                raise DestinationRefused(f"destination {host} refused: {reason}")
            results.append(
                {
                    "hostname": host,
                    "host": address,
                    "port": int(sockaddr[1]),
                    "family": fam,
                    "proto": proto,
                    "flags": socket.AI_NUMERICHOST,
                }
            )
        return results

    async def close(self) -> None:
        return None
