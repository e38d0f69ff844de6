"""Settings: frozen dataclasses with defaults, parsed strictly from the environment and TOML.

Each package that needs configuration declares its own frozen dataclass (``Settings`` here for
what every process shares; the worker and the API add theirs). :func:`load` fills any of them
from, in increasing precedence, the defaults, a TOML table and ``EMQ_*`` environment variables.
Parsing is strict: a malformed value, an unknown TOML key or an unknown ``EMQ_*`` variable is a
:class:`~emq.core.errors.ConfigError` whose one-line message names the variable or key.

Only entry points call :func:`load`; objects receive their settings through the constructor.
"""

from __future__ import annotations

import dataclasses
import enum
import ipaddress
import re
import tomllib
import types
import typing
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import urlsplit

from emq.core.errors import ConfigError
from emq.core.model import Namespace

IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network
ENV_PREFIX = "EMQ_"
# Variables that are not settings fields but are still ours (read by entry points and scripts).
EXTRA_ENV = frozenset({"EMQ_CONFIG", "EMQ_ZK_JAR"})
_T = TypeVar("_T")


def _check(fn: Callable[[Any], None]) -> dict[str, Any]:
    return {"check": fn}


def _redis_url(value: str) -> None:
    if urlsplit(value).scheme not in ("redis", "rediss", "unix"):
        raise ValueError("must be a redis://, rediss:// or unix:// URL")


_ZK_HOSTS_RE = re.compile(r"^[A-Za-z0-9_.\-\[\]:]+:\d+(,[A-Za-z0-9_.\-\[\]:]+:\d+)*(/[\w./-]*)?$")


def _zk_hosts(value: str) -> None:
    if not _ZK_HOSTS_RE.match(value):
        raise ValueError("must be host:port[,host:port...][/chroot]")


def _zk_auth(value: str) -> None:
    user, sep, password = value.partition(":")
    if value and (not sep or not user or not password or any(c.isspace() for c in user)):
        raise ValueError("must be user:password (ZooKeeper digest credentials), or empty")


def _http_url(value: str) -> None:
    parts = urlsplit(value)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError("must be an http:// or https:// URL")


def _positive(value: float) -> None:
    if value <= 0:
        raise ValueError("must be greater than 0")


def _not_negative(value: float) -> None:
    if value < 0:
        raise ValueError("must be at least 0")


def _log_level(value: str) -> None:
    if value.upper() not in ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL"):
        raise ValueError("must be DEBUG, INFO, WARNING, ERROR or CRITICAL")


def _key_prefix(value: str) -> None:
    if not re.match(r"^[A-Za-z0-9_.:-]{1,64}$", value):
        raise ValueError("must be 1-64 characters of A-Za-z0-9_.:- (no braces)")


class Durability(enum.Enum):
    """What a 202 waits for (see the README's "What 202 means")."""

    DEFAULT = "default"  # written to Redis (AOF fsync'd by the server every second)
    FSYNC = "fsync"  # the API refuses to start unless Redis runs `appendfsync always`
    REPLICA = "replica"  # each put also waits for a replica's acknowledgement (WAIT)


@dataclass(frozen=True)
class Settings:
    """What every EMQ process shares. The defaults point at the local stack (`emq stack up`)."""

    redis_url: str = field(default="redis://127.0.0.1:6390/0", metadata=_check(_redis_url))
    redis_cluster: bool = False  # EMQ_REDIS_URL names one node of a Redis Cluster
    zk_hosts: str = field(default="127.0.0.1:2191", metadata=_check(_zk_hosts))
    namespace: Namespace = Namespace.ONLINE
    admin_token: str = field(default="", repr=False)
    token: str = field(default="", repr=False)  # a tenant's API token, for the client and CLI
    api_url: str = field(default="http://127.0.0.1:8080", metadata=_check(_http_url))
    # How long the client and `emq enqueue` keep re-sending an enqueue answered 503 or not at all.
    client_retry_s: float = field(default=60.0, metadata=_check(_not_negative))
    push_allow_cidrs: tuple[IPNetwork, ...] = ()
    max_group_qps: int = field(default=150, metadata=_check(_positive))
    redis_key_prefix: str = field(default="emq", metadata=_check(_key_prefix))
    zk_root: str = "/emq"
    zk_session_timeout_s: float = field(default=10.0, metadata=_check(_positive))
    # ZooKeeper digest credentials: when set, every process authenticates with them and EMQ's
    # nodes are created readable and writable by that identity only (README, "Data at rest").
    zk_auth: str = field(default="", repr=False, metadata=_check(_zk_auth))
    # While rotating zk_auth: the old credentials, also authenticated and granted on new nodes.
    zk_previous_auth: str = field(default="", repr=False, metadata=_check(_zk_auth))
    stack_dir: str = ".emq"
    durability: Durability = Durability.DEFAULT
    durability_replicas: int = field(default=1, metadata=_check(_positive))  # replica: WAIT n
    durability_timeout_ms: int = field(default=1000, metadata=_check(_positive))  # replica: WAIT t
    log_level: str = field(default="INFO", metadata=_check(_log_level))
    # How long a job's outcome (delivered, retry, dead) stays readable by its id (0: not kept).
    job_record_ttl_s: int = field(default=600, metadata=_check(_not_negative))

    def __post_init__(self) -> None:
        if self.zk_previous_auth and not self.zk_auth:
            raise ConfigError("EMQ_ZK_PREVIOUS_AUTH is set without EMQ_ZK_AUTH (the new one)")

    def zk_credentials(self) -> tuple[str, ...]:
        """The digest credentials (``user:password``) to authenticate with, newest first."""
        return tuple(c for c in (self.zk_auth, self.zk_previous_auth) if c)


def env_name(name: str, prefix: str = ENV_PREFIX) -> str:
    """The environment variable of one settings field (``EMQ_REDIS_URL``)."""
    return prefix + name.upper()


def load(
    cls: type[_T],
    env: Mapping[str, str] | None = None,
    table: Mapping[str, Any] | None = None,
    *,
    env_prefix: str = ENV_PREFIX,
    source: str = "config file",
) -> _T:
    """Build ``cls`` from defaults < ``table`` (a TOML table) < ``env`` (``EMQ_*`` variables)."""
    hints = typing.get_type_hints(cls)
    fields = {f.name: f for f in dataclasses.fields(cls)}  # type: ignore[arg-type]
    for key in table or {}:
        if key not in fields:
            raise ConfigError(f"{source}: unknown key {key!r}")
    values: dict[str, Any] = {}
    for name, f in fields.items():
        var = env_name(name, env_prefix)
        if env is not None and var in env:
            values[name] = _convert(hints[name], env[var], var, from_env=True)
        elif table is not None and name in table:
            values[name] = _convert(hints[name], table[name], f"{source}: {name}", from_env=False)
        else:
            continue
        check = f.metadata.get("check")
        if check is not None:
            try:
                check(values[name])
            except ValueError as e:
                label = var if env is not None and var in env else f"{source}: {name}"
                raise ConfigError(f"{label} {e}") from None
    return cls(**values)


def read_toml(path: str | Path) -> dict[str, Any]:
    """Read a TOML configuration file, turning every failure into one ConfigError line."""
    try:
        with open(path, "rb") as fh:
            return tomllib.load(fh)
    except FileNotFoundError:
        raise ConfigError(f"config file {path} does not exist") from None
    except (OSError, tomllib.TOMLDecodeError) as e:
        raise ConfigError(f"config file {path}: {e}") from None


def unknown_env(
    env: Mapping[str, str],
    classes: Iterable[type[Any]],
    prefixed: Mapping[str, type[Any]] | None = None,
) -> list[str]:
    """``EMQ_*`` variables that no settings class knows (likely typos).

    ``classes`` use the plain ``EMQ_`` prefix; ``prefixed`` maps other prefixes (``EMQ_API_``)
    to the class read with them.
    """
    known = set(EXTRA_ENV)
    for cls in classes:
        known.update(env_name(f.name) for f in dataclasses.fields(cls))
    for prefix, cls in (prefixed or {}).items():
        known.update(env_name(f.name, prefix) for f in dataclasses.fields(cls))
    return sorted(k for k in env if k.startswith(ENV_PREFIX) and k not in known)


def _convert(tp: Any, raw: Any, label: str, *, from_env: bool) -> Any:
    try:
        return _parse(tp, raw, from_env)
    except (ValueError, TypeError) as e:
        raise ConfigError(f"{label}: {e}") from None


def _parse(tp: Any, raw: Any, from_env: bool) -> Any:
    origin = typing.get_origin(tp)
    if origin is tuple:
        (item_tp, _) = typing.get_args(tp)
        items = raw.split(",") if from_env and isinstance(raw, str) else raw
        if not isinstance(items, list | tuple):
            raise TypeError("must be a list")
        return tuple(
            _parse(item_tp, i.strip() if isinstance(i, str) else i, from_env)
            for i in items
            if not (isinstance(i, str) and not i.strip())
        )
    if origin in (types.UnionType, typing.Union) and set(typing.get_args(tp)) == set(
        typing.get_args(IPNetwork)
    ):
        return ipaddress.ip_network(str(raw), strict=False)
    if isinstance(tp, type) and issubclass(tp, enum.Enum):
        try:
            return tp(raw)
        except ValueError:
            raise ValueError(f"must be one of {', '.join(str(m.value) for m in tp)}") from None
    if tp is bool:
        return _parse_bool(raw)
    if tp in (int, float):
        return _parse_number(tp, raw)
    if tp is str:
        if not isinstance(raw, str):
            raise TypeError(f"must be a string, got {type(raw).__name__}")
        return raw
    raise TypeError(f"unsupported settings type {tp!r}")


def _parse_bool(raw: Any) -> bool:
    if isinstance(raw, bool):
        return raw
    if isinstance(raw, str) and raw.lower() in ("1", "true", "yes", "on"):
        return True
    if isinstance(raw, str) and raw.lower() in ("0", "false", "no", "off"):
        return False
    raise ValueError(f"must be true or false, got {raw!r}")


def _parse_number(tp: type[int] | type[float], raw: Any) -> int | float:
    if isinstance(raw, bool):
        raise TypeError("must be a number, got a boolean")
    if isinstance(raw, str):
        try:
            return tp(raw.strip())
        except ValueError:
            kind = "an integer" if tp is int else "a number"
            raise ValueError(f"must be {kind}, got {raw!r}") from None
    if tp is int and not isinstance(raw, int):
        raise TypeError(f"must be an integer, got {type(raw).__name__}")
    if not isinstance(raw, int | float):
        raise TypeError(f"must be a number, got {type(raw).__name__}")
    return tp(raw)
