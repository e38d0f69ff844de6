"""``emq zk secure``: put EMQ's ZooKeeper tree under the digest ACL of ``EMQ_ZK_AUTH``.

With ``EMQ_ZK_AUTH`` set, every EMQ process creates its nodes readable and writable by that
identity only (see :func:`emq.compose.zk_client_factory`); nodes created before keep the ACL they
were created with (``world:anyone:cdrwa`` when no credential was set). This one-shot command walks
``EMQ_ZK_ROOT`` (under the chroot of ``EMQ_ZK_HOSTS``) and sets the ACL of every node to the one
new nodes get: all to ``EMQ_ZK_AUTH`` (and ``EMQ_ZK_PREVIOUS_AUTH`` while rotating), nothing to
anyone else. It is idempotent, and ``--dry-run`` only counts. It runs kazoo's blocking calls on
purpose: it is a short command, not a service.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from emq.core.errors import EmqError

if TYPE_CHECKING:
    from emq.cli.common import Subparsers
    from emq.core.settings import Settings


def cmd_zk_secure(args: argparse.Namespace, settings: Settings) -> int:
    # kazoo is imported here, not with the parser, so that `emq --help` stays fast.
    import logging

    from kazoo.handlers.threading import KazooTimeoutError  # type: ignore[import-untyped]

    from emq.compose import zk_acl, zk_client_factory

    if not settings.zk_auth:
        raise EmqError("EMQ_ZK_AUTH is not set: there is no identity to secure the EMQ tree for")
    logging.getLogger("kazoo").setLevel(logging.CRITICAL)  # our own error line says it all
    client = zk_client_factory(settings)(
        hosts=settings.zk_hosts, timeout=settings.zk_session_timeout_s
    )
    try:
        client.start(timeout=settings.zk_session_timeout_s)
    except KazooTimeoutError:
        client.close()
        raise EmqError(f"ZooKeeper at {settings.zk_hosts} did not answer") from None
    try:
        result = secure(client, settings.zk_root, zk_acl(settings), dry_run=args.dry_run)
    finally:
        client.stop()
        client.close()
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        verb = "would change" if args.dry_run else "changed"
        print(f"{result['root']}: {result['nodes']} nodes, {verb} the ACL of {result['changed']}")
    return 0


def secure(client: Any, root: str, acl: list[Any], *, dry_run: bool) -> dict[str, Any]:
    """Set ``acl`` on ``root`` and every node below it; what was seen and changed."""
    from kazoo.exceptions import NoAuthError, NoNodeError  # type: ignore[import-untyped]

    if client.exists(root) is None:
        raise EmqError(f"{root} does not exist on ZooKeeper: nothing to secure")
    wanted = _key(acl)
    nodes = changed = 0
    for path in _walk(client, root):
        try:
            current, _stat = client.get_acls(path)
            nodes += 1
            if _key(current) == wanted:
                continue
            changed += 1
            if not dry_run:
                client.set_acls(path, acl)
        except NoNodeError:
            continue  # an ephemeral node that went meanwhile
        except NoAuthError:
            raise EmqError(_refused(path)) from None
    return {"root": root, "nodes": nodes, "changed": changed, "dry_run": dry_run}


def _walk(client: Any, root: str) -> Iterator[str]:
    """Every node under ``root`` (itself first), parents before their children."""
    from kazoo.exceptions import NoAuthError, NoNodeError

    pending = [root]
    while pending:
        path = pending.pop()
        yield path
        try:
            children = client.get_children(path)
        except NoNodeError:
            continue
        except NoAuthError:
            raise EmqError(_refused(path)) from None
        pending.extend(f"{path.rstrip('/')}/{c}" for c in sorted(children, reverse=True))


def _key(acl: list[Any]) -> set[tuple[int, str, str]]:
    return {(a.perms, a.id.scheme, a.id.id) for a in acl}


def _refused(path: str) -> str:
    return (
        f"ZooKeeper refused access to {path}: it is secured with other credentials (set "
        "EMQ_ZK_PREVIOUS_AUTH to them, or run as the server's superuser; docs/guides/zookeeper.md)"
    )


def add_zk_commands(sub: Subparsers) -> None:
    """Register ``zk secure`` on ``emq``'s subparsers."""
    zk = sub.add_parser(
        "zk",
        help="EMQ's ZooKeeper tree: access control",
        description="Manage the ACLs of EMQ's ZooKeeper nodes (EMQ_ZK_AUTH; docs/guides/"
        "zookeeper.md, 'Access control').",
    )
    actions = zk.add_subparsers(dest="action", metavar="ACTION", required=True)
    secure_p = actions.add_parser(
        "secure",
        help="set the EMQ_ZK_AUTH digest ACL on every node of the EMQ tree",
        description="Walk EMQ_ZK_ROOT and give every node the ACL that new nodes get with "
        "EMQ_ZK_AUTH set: all permissions to that digest identity (and to EMQ_ZK_PREVIOUS_AUTH "
        "while rotating), none to anyone else. Idempotent. Run it once every process has "
        "EMQ_ZK_AUTH, and again after a rotation.",
    )
    secure_p.add_argument(
        "--dry-run", action="store_true", help="count the nodes it would change, change nothing"
    )
    secure_p.add_argument("--json", action="store_true", help="print JSON")
    secure_p.set_defaults(func=cmd_zk_secure)
