"""The one error hierarchy of EMQ.

Every error EMQ raises on purpose derives from :class:`EmqError` and carries a stable
machine-readable ``code`` (the ``error.code`` of the HTTP API and the CLI). Driver errors
(redis, kazoo, aiohttp) are translated into these at the adapter seam with ``raise ... from e``,
so callers never catch a driver's exception type.

Where a caller would reasonably expect a stdlib type, the error inherits it too (the aiohttp
habit): invalid input is also a ``ValueError``, a delivery timeout is also a ``TimeoutError``.

The mapping from these classes to HTTP status codes lives in one place, the API, not here.
"""

from __future__ import annotations


class EmqError(Exception):
    """Root of every error EMQ raises on purpose."""

    code = "internal"

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class ConfigError(EmqError, ValueError):
    """A setting is missing or malformed; the message names the variable or key."""

    code = "config"


class InvalidInput(EmqError, ValueError):
    """A value supplied by a user is invalid; ``field`` names it (``jobs[3].headers.X-A``)."""

    code = "invalid"

    def __init__(self, field: str | None, message: str) -> None:
        super().__init__(message)
        self.field = field

    def __str__(self) -> str:
        return f"{self.field}: {self.message}" if self.field else self.message

    def prefixed(self, prefix: str) -> InvalidInput:
        """The same error with ``prefix`` put in front of the field (``jobs[3]`` + ``url``)."""
        field = f"{prefix}.{self.field}" if self.field else prefix
        return type(self)(field, self.message)


class MalformedRequest(InvalidInput):
    """The request could not be parsed at all (not JSON, not an object)."""

    code = "malformed"


class PayloadTooLarge(InvalidInput):
    """A job or a request is larger than the configured limit."""

    code = "too_large"


class RequestTimeout(EmqError, TimeoutError):
    """A client did not send its request in time (slow headers or body)."""

    code = "timeout"


class Unauthorized(EmqError):
    """No credentials, or credentials that match nobody."""

    code = "unauthorized"


class Forbidden(EmqError):
    """Valid credentials that may not do this."""

    code = "forbidden"


class NotFound(EmqError, LookupError):
    """A tenant, topic, group or job that does not exist (or is not the caller's to see)."""

    code = "not_found"


class AlreadyExists(EmqError):
    """Creating something that exists already."""

    code = "conflict"


class ConfigConflict(EmqError):
    """A concurrent writer changed the configuration first (version mismatch); retry."""

    code = "conflict"


class BacklogFull(EmqError):
    """A topic's backlog is above its ``max_backlog``; the caller should retry later."""

    code = "backlog_full"

    def __init__(self, message: str, retry_after_s: float) -> None:
        super().__init__(message)
        self.retry_after_s = retry_after_s


class BackendUnavailable(EmqError, ConnectionError):
    """Redis or ZooKeeper cannot be reached (or answered with a transient error)."""

    code = "unavailable"


class Fenced(EmqError):
    """A write carried an ownership epoch older than the group's current one.

    The writer is a former owner (paused, partitioned, or slow to hand over) and must stop
    touching the group at once.
    """

    code = "fenced"


class DeliveryError(EmqError):
    """An HTTP push failed; ``retryable`` says whether another attempt may succeed."""

    code = "delivery_failed"

    def __init__(self, message: str, *, retryable: bool = True, status: int | None = None) -> None:
        super().__init__(message)
        self.retryable = retryable
        self.status = status


class DeliveryTimeout(DeliveryError, TimeoutError):
    """An HTTP push did not complete within its connect or total timeout."""

    code = "delivery_timeout"


class DestinationRefused(DeliveryError):
    """The SSRF guard refused the destination address; never retried."""

    code = "destination_refused"

    def __init__(self, message: str) -> None:
        super().__init__(message, retryable=False)


class Undeliverable(DeliveryError):
    """The job's request cannot be put on the wire as given (a URL or a header that HTTP cannot
    carry, text that is not valid UTF-8); never retried: no attempt could succeed."""

    code = "undeliverable"

    def __init__(self, message: str) -> None:
        super().__init__(message, retryable=False)
