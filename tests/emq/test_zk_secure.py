"""ZooKeeper ACLs for EMQ's nodes (issue 11, item 8), on a real ZooKeeper.

With ``EMQ_ZK_AUTH`` set, the nodes EMQ creates (a topic's, with its signing secret, included)
grant everything to that digest identity and nothing to anyone else; without it, nodes stay open
as before. ``emq zk secure`` closes a tree made before the credential was set, and a rotation
through ``EMQ_ZK_PREVIOUS_AUTH`` keeps every process able to read throughout.
"""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Iterator

import pytest
from kazoo.client import KazooClient
from kazoo.exceptions import NoAuthError
from kazoo.security import OPEN_ACL_UNSAFE, make_digest_acl

from emq.compose import open_config
from emq.core.errors import BackendUnavailable
from emq.core.model import Namespace, Tenant, Topic, TopicRef
from emq.core.naming import ZkPaths
from emq.core.settings import Settings, load

AUTH = "emq:s3cret-pw"
NEW_AUTH = "emq2:an0ther-pw"
SECRET = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
REF = TopicRef(Namespace.ONLINE, "acme", "orders")


def client(hosts: str, *credentials: str) -> KazooClient:
    c = KazooClient(hosts=hosts, auth_data=[("digest", a) for a in credentials])
    c.start(timeout=10)
    return c


@pytest.fixture
def cleanup(zk_hosts: str, settings: Settings) -> Iterator[None]:
    """Delete the EMQ tree after the test with every credential it may be secured with (the
    session fixture's unauthenticated client could not list a secured node's children)."""
    yield
    c = client(zk_hosts, AUTH, NEW_AUTH)
    try:
        c.delete(settings.zk_root, recursive=True)
    finally:
        c.stop()
        c.close()


async def make_topic(settings: Settings) -> None:
    store = await open_config(settings)
    try:
        await store.create_tenant(Tenant("acme", "Acme", "0" * 64, time.time()))
        await store.create_topic(Topic(REF, 10, 1, secret=SECRET))
    finally:
        await store.aclose()


async def read_secret(settings: Settings) -> str:
    store = await open_config(settings)
    try:
        return (await store.get_topic(REF)).secret
    finally:
        await store.aclose()


def acls(c: KazooClient, root: str) -> dict[str, set[tuple[int, str, str]]]:
    """Every node under ``root`` with its ACL."""
    found, pending = {}, [root]
    while pending:
        path = pending.pop()
        acl, _ = c.get_acls(path)
        found[path] = {(a.perms, a.id.scheme, a.id.id) for a in acl}
        pending += [f"{path}/{child}" for child in c.get_children(path)]
    return found


def digest(*credentials: str) -> set[tuple[int, str, str]]:
    out = set()
    for credential in credentials:
        a = make_digest_acl(*credential.split(":", 1), all=True)
        out.add((a.perms, a.id.scheme, a.id.id))
    return out


def emq(zk_hosts: str, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    base = {k: v for k, v in os.environ.items() if not k.startswith("EMQ_")}
    return subprocess.run(
        [sys.executable, "-m", "emq", *args],
        env=base | {"EMQ_ZK_HOSTS": zk_hosts} | env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


@pytest.fixture
async def secured(settings: Settings, cleanup: None) -> AsyncIterator[Settings]:
    yield dataclasses.replace(settings, zk_auth=AUTH)


async def test_with_auth_the_secret_is_closed_to_other_clients(
    secured: Settings, zk_hosts: str
) -> None:
    await make_topic(secured)
    path = ZkPaths(secured.zk_root).topic(REF)
    anonymous, other = client(zk_hosts), client(zk_hosts, "someone:else")
    try:
        for c in (anonymous, other):
            with pytest.raises(NoAuthError):
                c.get(path)
    finally:
        for c in (anonymous, other):
            c.stop()
            c.close()
    assert await read_secret(secured) == SECRET
    owner = client(zk_hosts, AUTH)
    try:
        tree = acls(owner, secured.zk_root)
    finally:
        owner.stop()
        owner.close()
    assert path in tree and len(tree) > 5
    assert all(acl == digest(AUTH) for acl in tree.values()), tree


async def test_a_process_without_the_credential_gets_a_clear_error(
    secured: Settings, settings: Settings
) -> None:
    await make_topic(secured)
    with pytest.raises(BackendUnavailable, match=r"refused access.*EMQ_ZK_AUTH"):
        await read_secret(settings)


async def test_without_auth_nodes_stay_open_as_before(settings: Settings, zk_hosts: str) -> None:
    await make_topic(settings)
    anonymous = client(zk_hosts)
    try:
        data, _ = anonymous.get(ZkPaths(settings.zk_root).topic(REF))
        tree = acls(anonymous, settings.zk_root)
    finally:
        anonymous.stop()
        anonymous.close()
    assert SECRET in data.decode()
    open_acl = {(a.perms, a.id.scheme, a.id.id) for a in OPEN_ACL_UNSAFE}
    assert all(acl == open_acl for acl in tree.values())


async def test_zk_secure_closes_a_tree_made_before_auth(
    settings: Settings, zk_hosts: str, cleanup: None
) -> None:
    await make_topic(settings)  # no credential yet: world-open nodes
    dry = emq(zk_hosts, "zk", "secure", "--dry-run", "--json", EMQ_ZK_AUTH=AUTH)
    assert dry.returncode == 0, dry.stderr
    counted = json.loads(dry.stdout)
    assert counted["changed"] == counted["nodes"] > 5
    assert await read_secret(settings) == SECRET  # a dry run changes nothing
    done = emq(zk_hosts, "zk", "secure", "--json", EMQ_ZK_AUTH=AUTH)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["changed"] == counted["nodes"]
    anonymous = client(zk_hosts)
    try:
        with pytest.raises(NoAuthError):
            anonymous.get(ZkPaths(settings.zk_root).topic(REF))
    finally:
        anonymous.stop()
        anonymous.close()
    assert await read_secret(dataclasses.replace(settings, zk_auth=AUTH)) == SECRET
    again = emq(zk_hosts, "zk", "secure", "--json", EMQ_ZK_AUTH=AUTH)
    assert json.loads(again.stdout)["changed"] == 0  # idempotent


async def test_zk_secure_refuses_with_one_line(secured: Settings, zk_hosts: str) -> None:
    await make_topic(secured)
    for env in ({}, {"EMQ_ZK_AUTH": "someone:else"}, {"EMQ_ZK_AUTH": "no-password"}):
        done = emq(zk_hosts, "zk", "secure", **env)
        assert done.returncode != 0, env
        lines = done.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("emq: error: "), done.stderr
    assert await read_secret(secured) == SECRET


async def test_rotation_keeps_every_process_reading(
    secured: Settings, zk_hosts: str, settings: Settings
) -> None:
    await make_topic(secured)  # secured with the old credential
    both = dataclasses.replace(settings, zk_auth=NEW_AUTH, zk_previous_auth=AUTH)
    assert await read_secret(both) == SECRET  # a restarted process reads the old nodes
    rotated = emq(
        zk_hosts, "zk", "secure", "--json", EMQ_ZK_AUTH=NEW_AUTH, EMQ_ZK_PREVIOUS_AUTH=AUTH
    )
    assert rotated.returncode == 0, rotated.stderr
    assert await read_secret(secured) == SECRET  # a process not yet restarted still reads
    final = emq(zk_hosts, "zk", "secure", "--json", EMQ_ZK_AUTH=NEW_AUTH)
    assert final.returncode == 0, final.stderr
    assert await read_secret(dataclasses.replace(settings, zk_auth=NEW_AUTH)) == SECRET
    with pytest.raises(BackendUnavailable, match="refused access"):
        await read_secret(secured)  # the old credential no longer opens anything


def test_settings_check_the_credential() -> None:
    with pytest.raises(ValueError, match="EMQ_ZK_AUTH: must be user:password"):
        load(Settings, {"EMQ_ZK_AUTH": "nocolon"})
    with pytest.raises(ValueError, match="EMQ_ZK_PREVIOUS_AUTH is set without EMQ_ZK_AUTH"):
        Settings(zk_previous_auth=AUTH)
    assert AUTH not in repr(Settings(zk_auth=AUTH))


def test_config_show_masks_the_credentials(zk_hosts: str) -> None:
    done = emq(
        zk_hosts, "config", "show", "--json", EMQ_ZK_AUTH=AUTH, EMQ_ZK_PREVIOUS_AUTH=NEW_AUTH
    )
    assert done.returncode == 0, done.stderr
    shown = json.loads(done.stdout)
    assert shown["EMQ_ZK_AUTH"]["value"] == shown["EMQ_ZK_PREVIOUS_AUTH"]["value"] == "***"
    assert "s3cret" not in done.stdout and "an0ther" not in done.stdout
