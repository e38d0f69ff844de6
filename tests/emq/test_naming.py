from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st
from redis.crc import key_slot

from emq.core.errors import ConfigError, InvalidInput
from emq.core.model import GroupRef, Namespace, Priority, TopicRef
from emq.core.naming import RedisKeys, ZkPaths, escape, hash_tag

KEYS = RedisKeys("emq")


def _every_group_key(keys: RedisKeys, g: GroupRef) -> list[str]:
    out = [keys.epoch(g), keys.retries(g), keys.delayed(g), keys.dlq(g), keys.idempotency(g, "x")]
    for q in g.queues():
        out += [keys.stream(q), keys.checkpoint(q)]
    return out


def test_key_shape_is_readable() -> None:
    g = TopicRef(Namespace.ONLINE, "acme", "orders").group(2)
    assert KEYS.stream(g.queue(Priority.HIGH)) == "emq:g:{online:acme:orders:2}:q:high"
    assert KEYS.checkpoint(g.queue(Priority.LOW)) == "emq:g:{online:acme:orders:2}:ckpt:low"


def test_every_key_of_a_group_shares_one_slot() -> None:
    g = TopicRef(Namespace.SANDBOX, "t", "p").group(0)
    keys = _every_group_key(KEYS, g)
    assert len(set(keys)) == len(keys)
    assert {key_slot(k.encode()) for k in keys} == {key_slot(b"sandbox:t:p:0")}


any_text = st.text(min_size=1, max_size=20)


@given(tenant=any_text, topic=any_text, index=st.integers(0, 10_000), idem=st.text(max_size=20))
def test_user_text_cannot_move_the_hash_tag(tenant: str, topic: str, index: int, idem: str) -> None:
    # Names are validated before they get here; the naming must hold even if one is not.
    g = TopicRef(Namespace.ONLINE, tenant, topic).group(index)
    expected = KEYS.group_tag(g)[1:-1]
    assert "{" not in expected and "}" not in expected
    for key in [*_every_group_key(KEYS, g), KEYS.idempotency(g, idem)]:
        assert hash_tag(key) == expected


@given(a=st.tuples(any_text, any_text), b=st.tuples(any_text, any_text))
def test_distinct_groups_get_distinct_tags(a: tuple[str, str], b: tuple[str, str]) -> None:
    ga = TopicRef(Namespace.ONLINE, *a).group(0)
    gb = TopicRef(Namespace.ONLINE, *b).group(0)
    assert (KEYS.group_tag(ga) == KEYS.group_tag(gb)) == (a == b)


def test_escape_is_reversible_and_brace_free() -> None:
    assert escape("a{b}:c%") == "a%7Bb%7D%3Ac%25"


def test_namespaces_and_prefixes_separate_keys() -> None:
    on = TopicRef(Namespace.ONLINE, "a", "b").group(0).queue(Priority.LOW)
    sb = TopicRef(Namespace.SANDBOX, "a", "b").group(0).queue(Priority.LOW)
    assert KEYS.stream(on) != KEYS.stream(sb)
    assert RedisKeys("t-1").stream(on).startswith("t-1:")


@pytest.mark.parametrize("prefix", ["", "a{b", "x}", "a b", "x" * 65])
def test_bad_prefix_is_refused(prefix: str) -> None:
    with pytest.raises(ConfigError):
        RedisKeys(prefix)


def test_hash_tag_follows_the_redis_rule() -> None:
    assert hash_tag("a{b}c") == "b"
    assert hash_tag("a{}c{d}") == "a{}c{d}"
    assert hash_tag("plain") == "plain"
    assert hash_tag("{x}{y}") == "x"


def test_zookeeper_paths() -> None:
    p = ZkPaths("/emq")
    ref = TopicRef(Namespace.ONLINE, "acme", "orders")
    assert p.topic(ref) == "/emq/online/topics/acme/orders"
    assert p.worker(Namespace.SANDBOX, "w-1") == "/emq/sandbox/running/w-1"
    assert p.assignments(Namespace.ONLINE) == "/emq/online/assignments"
    assert p.leader(Namespace.ONLINE) == "/emq/online/leader"
    assert p.tenant("acme") == "/emq/tenants/acme"


@pytest.mark.parametrize("bad", ["a/b", "", "..", "."])
def test_zookeeper_components_cannot_escape(bad: str) -> None:
    with pytest.raises(InvalidInput):
        ZkPaths().tenant(bad)


@pytest.mark.parametrize("root", ["emq", "/", "/a//b", "/a/"])
def test_bad_zookeeper_root(root: str) -> None:
    with pytest.raises(ConfigError):
        ZkPaths(root)
