"""Tenant views and changes the API shares: a tenant's row, its cap per namespace."""

from __future__ import annotations

from dataclasses import replace

from emq.api import answers
from emq.core.model import Namespace, Tenant


def tenant_row(tenant: Tenant) -> answers.TenantRow:
    """A tenant as the API shows it (never its token)."""
    row: answers.TenantRow = {
        "tenant": tenant.name,
        "name": tenant.display_name,
        "created_at": tenant.created_at,
    }
    if tenant.qps_caps:
        row["qps_caps"] = dict(sorted(tenant.qps_caps.items()))
    return row


def with_cap(namespace: Namespace, cap: int | None, tenant: Tenant) -> Tenant:
    """``tenant`` with its cap in ``namespace`` set to ``cap`` (``None``: removed)."""
    caps = {k: v for k, v in tenant.qps_caps.items() if k != namespace.value}
    if cap is not None:
        caps[namespace.value] = cap
    return replace(tenant, qps_caps=caps)
