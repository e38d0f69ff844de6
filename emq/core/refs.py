"""Names and references: namespaces, priorities, the name rule, and the references to a topic,
a group and a physical queue.

A topic is named by ``namespace/tenant/topic``; it is split into groups (``.../g3``), each with
three physical queues (``.../g3/high``). These are frozen values used as dict keys across the
worker, the allocator and the adapters. Nothing here does I/O or imports another EMQ package.
"""

from __future__ import annotations

import enum
import re
from dataclasses import dataclass
from typing import TypeVar

from emq.core.errors import InvalidInput

NAME_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}")


class Namespace(enum.StrEnum):
    """``online`` carries production traffic; ``sandbox`` is for trying changes first."""

    ONLINE = "online"
    SANDBOX = "sandbox"

    @classmethod
    def parse(cls, value: object, field_name: str = "namespace") -> Namespace:
        return _parse_enum(cls, value, field_name)


class Priority(enum.StrEnum):
    """The three physical queues of a group, served high before medium before low."""

    HIGH = "high"
    MEDIUM = "medium"
    LOW = "low"

    @property
    def rank(self) -> int:
        """0 for high, 1 for medium, 2 for low: the order of service."""
        return _PRIORITY_RANK[self]

    @classmethod
    def parse(cls, value: object, field_name: str = "priority") -> Priority:
        return _parse_enum(cls, value, field_name)


_PRIORITY_RANK = {Priority.HIGH: 0, Priority.MEDIUM: 1, Priority.LOW: 2}
PRIORITIES: tuple[Priority, ...] = (Priority.HIGH, Priority.MEDIUM, Priority.LOW)


class PriorityMode(enum.StrEnum):
    """How a group's budget is shared: ``strict`` (H>M>L) or ``weighted`` (6:3:1 with aging)."""

    STRICT = "strict"
    WEIGHTED = "weighted"

    @classmethod
    def parse(cls, value: object, field_name: str = "priority_mode") -> PriorityMode:
        return _parse_enum(cls, value, field_name)


_E = TypeVar("_E", bound=enum.Enum)


def _parse_enum(cls: type[_E], value: object, field_name: str) -> _E:
    try:
        return cls(value)
    except ValueError:
        allowed = ", ".join(str(m.value) for m in cls)
        raise InvalidInput(field_name, f"must be one of {allowed}, got {value!r}") from None


def validate_name(value: object, field_name: str) -> str:
    """A tenant or topic name: 1-64 characters of ``A-Za-z0-9_.-``, starting alphanumeric."""
    if not isinstance(value, str):
        raise InvalidInput(field_name, f"must be a string, got {type(value).__name__}")
    if not NAME_RE.fullmatch(value):
        raise InvalidInput(
            field_name,
            "must be 1-64 characters of A-Z a-z 0-9 _ . - starting with a letter or digit",
        )
    return value


# --------------------------------------------------------------------------- references


@dataclass(frozen=True, slots=True)
class TopicRef:
    """Names one topic: the same topic name in two namespaces is two topics."""

    namespace: Namespace
    tenant: str
    topic: str

    def group(self, index: int) -> GroupRef:
        return GroupRef(self, index)

    def __str__(self) -> str:
        return f"{self.namespace.value}/{self.tenant}/{self.topic}"


@dataclass(frozen=True, slots=True)
class GroupRef:
    """One group of a topic: the unit of assignment to a worker and of QPS accounting."""

    topic: TopicRef
    index: int

    def queue(self, priority: Priority) -> QueueRef:
        return QueueRef(self, priority)

    def queues(self) -> tuple[QueueRef, ...]:
        return tuple(QueueRef(self, p) for p in PRIORITIES)

    def __str__(self) -> str:
        return f"{self.topic}/g{self.index}"


@dataclass(frozen=True, slots=True)
class QueueRef:
    """One physical queue: a group's ``high``, ``medium`` or ``low`` log."""

    group: GroupRef
    priority: Priority

    def __str__(self) -> str:
        return f"{self.group}/{self.priority.value}"
