"""Settings: frozen dataclasses with defaults, parsed strictly from the environment and TOML.

Each package that needs configuration declares its own frozen dataclass (``Settings`` here for
what every process shares; the API, the worker and the fleet add theirs), each field with
:func:`setting`: its default, the check its value must pass and whether it is a secret. The
class's ``ENV_PREFIX`` names its variables (``EMQ_`` + the field's name in capitals, or
``EMQ_WORKER_`` + ..., and so on). :func:`load` fills any of them from, in increasing precedence,
the defaults, a TOML table and ``EMQ_*`` environment variables. Parsing is strict: a malformed
or out-of-range value, an unknown TOML key or an unknown ``EMQ_*`` variable is a
:class:`~emq.core.errors.ConfigError` whose one-line message names the variable or key, e.g.
``EMQ_WORKER_SENDERS: must be at least 1, got 0``. A secret's value never appears in an error
or a ``repr``; :func:`shown` is how a value may be printed (secrets as ``***``, passwords inside
URLs too).

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
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar, TypeVar
from urllib.parse import urlsplit, urlunsplit

from emq.core.errors import ConfigError
from emq.core.model import Namespace

IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network
ENV_PREFIX = "EMQ_"
MASK = "***"
# Variables that are ours but not fields of a settings class, with their defaults: read by the
# entry point before any settings exist (the file to read them from) and by deploy/zookeeper.sh.
EXTRA_ENV: Mapping[str, str] = {
    "EMQ_CONFIG": "",
    "EMQ_ZK_JAR": "/usr/share/java/zookeeper.jar",
    # Where the docs' examples send their jobs (any receiver answering 200); EMQ ignores it, but
    # a shell that exported it must still run every `emq` command.
    "EMQ_SINK_URL": "",
}
_T = TypeVar("_T")
Check = Callable[[Any], None]


def setting(default: Any, check: Check | None = None, *, secret: bool = False) -> Any:
    """A settings field: its default, the check its value must pass, whether it is secret."""
    metadata = {"check": check, "secret": secret}
    return dataclasses.field(default=default, metadata=metadata, repr=not secret)


# ----------------------------------------------------------------------------- checks
# A check raises ValueError("must be ...") for a value out of range; the caller names the variable.


def at_least(low: float) -> Check:
    """A number's check: ``low`` or more."""

    def check(value: float) -> None:
        if not value >= low:
            raise ValueError(f"must be at least {low}")

    return check


def greater_than(low: float) -> Check:
    """A number's check: more than ``low``."""

    def check(value: float) -> None:
        if not value > low:
            raise ValueError(f"must be greater than {low}")

    return check


def between(low: float, high: float) -> Check:
    """A number's check: from ``low`` to ``high``, both included."""

    def check(value: float) -> None:
        if not low <= value <= high:
            raise ValueError(f"must be from {low} to {high}")

    return check


def matching(pattern: str, what: str) -> Check:
    """A string's check: the whole of it matches ``pattern`` (``what`` says so in words)."""
    compiled = re.compile(pattern)

    def check(value: str) -> None:
        if not compiled.fullmatch(value):
            raise ValueError(f"must be {what}")

    return check


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


def _log_level(value: str) -> None:
    if value.upper() not in ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL"):
        raise ValueError("must be DEBUG, INFO, WARNING, ERROR or CRITICAL")


def _token(value: str) -> None:
    # Sent in an Authorization header: what a header value cannot hold, it cannot be.
    if any(c.isspace() or not c.isprintable() for c in value):
        raise ValueError("must be printable, without spaces")


_key_prefix = matching(r"[A-Za-z0-9_.:-]{1,64}", "1-64 characters of A-Za-z0-9_.:- (no braces)")
_zk_root = matching(r"(/[A-Za-z0-9_.\-]+)+", "an absolute ZooKeeper path (/emq)")
_not_empty = matching(r".+", "set (not empty)")


class Durability(enum.Enum):
    """What a 202 waits for (docs/guides/durability.md)."""

    DEFAULT = "default"  # written to Redis (AOF fsync'd by the server every second)
    FSYNC = "fsync"  # the API refuses to start unless Redis runs `appendfsync always`
    REPLICA = "replica"  # each put also waits for a replica's acknowledgement (WAIT)


@dataclass(frozen=True)
class Settings:
    """What every EMQ process shares. The defaults point at the local stack (`emq stack up`)."""

    ENV_PREFIX: ClassVar[str] = ENV_PREFIX

    redis_url: str = setting("redis://127.0.0.1:6390/0", _redis_url)
    redis_cluster: bool = False  # EMQ_REDIS_URL names one node of a Redis Cluster
    zk_hosts: str = setting("127.0.0.1:2191", _zk_hosts)
    namespace: Namespace = Namespace.ONLINE
    admin_token: str = setting("", _token, secret=True)
    token: str = setting("", _token, secret=True)  # a tenant's API token, for the client and CLI
    api_url: str = setting("http://127.0.0.1:8080", _http_url)
    # How long the client and `emq enqueue` keep re-sending an enqueue answered 503 or not at all.
    client_retry_s: float = setting(60.0, at_least(0))
    push_allow_cidrs: tuple[IPNetwork, ...] = ()
    max_group_qps: int = setting(150, at_least(1))
    redis_key_prefix: str = setting("emq", _key_prefix)
    zk_root: str = setting("/emq", _zk_root)
    zk_session_timeout_s: float = setting(10.0, greater_than(0))
    # ZooKeeper digest credentials: when set, every process authenticates with them and EMQ's
    # nodes are created readable and writable by that identity only (docs/guides/zookeeper.md).
    zk_auth: str = setting("", _zk_auth, secret=True)
    # While rotating zk_auth: the old credentials, also authenticated and granted on new nodes.
    zk_previous_auth: str = setting("", _zk_auth, secret=True)
    stack_dir: str = setting(".emq", _not_empty)
    durability: Durability = Durability.DEFAULT
    durability_replicas: int = setting(1, at_least(1))  # replica: WAIT n
    durability_timeout_ms: int = setting(1000, at_least(1))  # replica: WAIT t
    log_level: str = setting("INFO", _log_level)
    # Ready signals and due entries addressed to each group's owner (emq.core.signals); false:
    # every hint goes to the shared keys that every worker reads (the layout before, a fallback).
    signal_routes: bool = True
    # How long a job's outcome (delivered, retry, dead) stays readable by its id (0: not kept).
    job_record_ttl_s: int = setting(600, at_least(0))
    # The attempt log's byte budget per namespace (docs/concepts/attempts.md): beyond it the
    # oldest records go first, whatever their age.
    attempt_log_max_bytes: int = setting(256 * 1024 * 1024, at_least(1024 * 1024))
    # The change log (emq.core.changes, `emq changes`): how long a quota, split, weight or cap
    # change stays recorded (and revertible), and at most how many are kept (oldest first out).
    changes_retention_s: int = setting(30 * 86_400, at_least(60))
    changes_max_entries: int = setting(100_000, at_least(100))

    def __post_init__(self) -> None:
        validate(self)
        if self.zk_previous_auth and not self.zk_auth:
            raise ConfigError("EMQ_ZK_PREVIOUS_AUTH is set without EMQ_ZK_AUTH (the new one)")

    def zk_credentials(self) -> tuple[str, ...]:
        """The digest credentials (``user:password``) to authenticate with, newest first."""
        return tuple(c for c in (self.zk_auth, self.zk_previous_auth) if c)


def env_name(name: str, prefix: str = ENV_PREFIX) -> str:
    """The environment variable of one settings field (``EMQ_REDIS_URL``)."""
    return prefix + name.upper()


def prefix_of(cls: type[Any]) -> str:
    """The prefix of a settings class's variables (``EMQ_``, ``EMQ_WORKER_``, ...)."""
    return str(getattr(cls, "ENV_PREFIX", ENV_PREFIX))


def is_secret(f: dataclasses.Field[Any]) -> bool:
    """Whether a settings field holds a secret (never printed)."""
    return bool(f.metadata.get("secret"))


def validate(obj: Any) -> None:
    """Run every field's check on a settings object (from its ``__post_init__``), so one built
    in code is held to what :func:`load` holds the environment to."""
    prefix = prefix_of(type(obj))
    for f in dataclasses.fields(obj):
        _check(f, getattr(obj, f.name), env_name(f.name, prefix))


def _check(f: dataclasses.Field[Any], value: Any, label: str) -> None:
    check = f.metadata.get("check")
    if check is None:
        return
    try:
        check(value)
    except ValueError as e:
        got = "" if is_secret(f) else f", got {shown_value(value)!r}"
        raise ConfigError(f"{label}: {e}{got}") from None


def load(
    cls: type[_T],
    env: Mapping[str, str] | None = None,
    table: Mapping[str, Any] | None = None,
    *,
    env_prefix: str | None = None,
    source: str = "config file",
) -> _T:
    """Build ``cls`` from defaults < ``table`` (a TOML table) < ``env`` (``EMQ_*`` variables)."""
    prefix = env_prefix if env_prefix is not None else prefix_of(cls)
    hints = typing.get_type_hints(cls)
    fields = {f.name: f for f in dataclasses.fields(cls)}  # type: ignore[arg-type]
    for key in table or {}:
        if key not in fields:
            raise ConfigError(f"{source}: unknown key {key!r}")
    values: dict[str, Any] = {}
    for name, f in fields.items():
        var = env_name(name, prefix)
        if env is not None and var in env:
            label, raw, from_env = var, env[var], True
        elif table is not None and name in table:
            label, raw, from_env = f"{source}: {name}", table[name], False
        else:
            continue
        values[name] = _convert(hints[name], raw, label, from_env=from_env, secret=is_secret(f))
        _check(f, values[name], label)
    return cls(**values)


def source_of(
    cls: type[Any], name: str, env: Mapping[str, str], table: Mapping[str, Any], source: str
) -> str:
    """Where :func:`load` took a field's value from: ``env``, ``source`` or ``default``."""
    if env_name(name, prefix_of(cls)) in env:
        return "env"
    return source if name in table else "default"


def shown_value(value: Any) -> Any:
    """A setting's value as printed: enums by value, networks as text, URL passwords masked."""
    if isinstance(value, enum.Enum):
        return value.value
    if isinstance(value, tuple):
        return [shown_value(v) for v in value]
    if isinstance(value, str):
        return mask_url(value)
    if isinstance(value, int | float | bool):
        return value
    return str(value)


def shown(f: dataclasses.Field[Any], value: Any) -> Any:
    """A field's value as it may be printed: a secret is ``***`` (empty stays empty)."""
    if is_secret(f):
        return MASK if value else ""
    return shown_value(value)


def mask_url(text: str) -> str:
    """``text`` with the password of a URL in it masked: ``redis://u:pw@h`` is
    ``redis://u:***@h``; anything that is not a URL with a password is returned as it is."""
    if "@" not in text or "://" not in text:
        return text
    try:
        parts = urlsplit(text)
        password = parts.password
    except ValueError:
        return text
    if password is None:
        return text
    userinfo, _, host = parts.netloc.rpartition("@")
    user = userinfo.partition(":")[0]
    return urlunsplit(parts._replace(netloc=f"{user}:{MASK}@{host}"))


def read_toml(path: str | Path) -> dict[str, Any]:
    """Read a TOML configuration file, turning every failure into one ConfigError line."""
    try:
        with open(path, "rb") as fh:
            return tomllib.load(fh)
    except FileNotFoundError:
        raise ConfigError(f"config file {path} does not exist") from None
    except (OSError, tomllib.TOMLDecodeError) as e:
        raise ConfigError(f"config file {path}: {e}") from None


def declared_env(classes: Iterable[type[Any]]) -> set[str]:
    """Every ``EMQ_*`` variable the settings classes (and :data:`EXTRA_ENV`) declare."""
    known = set(EXTRA_ENV)
    for cls in classes:
        prefix = prefix_of(cls)
        known.update(env_name(f.name, prefix) for f in dataclasses.fields(cls))
    return known


def unknown_env(
    env: Mapping[str, str],
    classes: Iterable[type[Any]],
    prefixed: Mapping[str, type[Any]] | None = None,
) -> list[str]:
    """``EMQ_*`` variables that no settings class knows (likely typos).

    Each class's variables carry its ``ENV_PREFIX``; ``prefixed`` maps a prefix to a class read
    with it instead (kept for callers that name the prefix themselves).
    """
    known = declared_env(classes)
    for prefix, cls in (prefixed or {}).items():
        known.update(env_name(f.name, prefix) for f in dataclasses.fields(cls))
    return sorted(k for k in env if k.startswith(ENV_PREFIX) and k not in known)


def _convert(tp: Any, raw: Any, label: str, *, from_env: bool, secret: bool = False) -> Any:
    try:
        return _parse(tp, raw, from_env)
    except (ValueError, TypeError) as e:
        if secret:  # the message may quote the value
            raise ConfigError(f"{label}: must be a {getattr(tp, '__name__', tp)}") from None
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
            choices = ", ".join(str(m.value) for m in tp)
            raise ValueError(f"must be one of {choices}, got {raw!r}") from None
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
