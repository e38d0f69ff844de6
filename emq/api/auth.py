"""Who is calling: the admin, a tenant, or nobody.

Tenant tokens look like ``<tenant>.<secret>``: the name says which tenant to load, and the
SHA-256 of the whole token must match the one stored for it. Tokens carry 256 random bits, so a
plain SHA-256 is enough (a slow password hash would only cost every request time); the plain
token is shown once, when the tenant is created, and never stored.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
from dataclasses import dataclass

from aiohttp import web

from emq.core.errors import Forbidden, NotFound, Unauthorized
from emq.core.interfaces import ConfigStore
from emq.core.model import NAME_RE


@dataclass(frozen=True, slots=True)
class Principal:
    """The caller: ``tenant`` is ``None`` for the admin."""

    tenant: str | None

    @property
    def is_admin(self) -> bool:
        return self.tenant is None


ADMIN = Principal(None)


def new_token(tenant: str) -> str:
    return f"{tenant}.{secrets.token_urlsafe(32)}"


def token_hash(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def bearer(request: web.Request) -> str:
    header = request.headers.get("Authorization", "")
    scheme, _, token = header.partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        raise Unauthorized("missing bearer token (Authorization: Bearer <token>)")
    token = token.strip()
    if not token.isascii() or not token.isprintable():  # tokens are ASCII; aiohttp hands other
        raise Unauthorized("invalid token")  # bytes over as surrogate escapes
    return token


class Authenticator:
    """Resolves a request's bearer token to a :class:`Principal`."""

    def __init__(self, config: ConfigStore, admin_token: str) -> None:
        self._config = config
        self._admin_token = admin_token.encode()

    async def principal(self, request: web.Request) -> Principal:
        token = bearer(request)
        if self._admin_token and hmac.compare_digest(token.encode(), self._admin_token):
            return ADMIN
        tenant_name, dot, secret = token.rpartition(".")
        if not dot or not secret or not NAME_RE.fullmatch(tenant_name):
            raise Unauthorized("invalid token")
        try:
            tenant = await self._config.get_tenant(tenant_name)
        except NotFound:
            raise Unauthorized("invalid token") from None
        if not hmac.compare_digest(token_hash(token), tenant.token_sha256):
            raise Unauthorized("invalid token")
        return Principal(tenant.name)

    async def admin(self, request: web.Request) -> Principal:
        who = await self.principal(request)
        if not who.is_admin:
            raise Forbidden("this route needs the admin token")
        return who

    async def tenant_or_admin(self, request: web.Request, tenant: str) -> Principal:
        """A tenant may only touch its own tenant; another tenant's things don't exist for it."""
        who = await self.principal(request)
        if not who.is_admin and who.tenant != tenant:
            raise NotFound(f"tenant {tenant!r} not found")
        return who
