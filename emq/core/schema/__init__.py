"""The HTTP API's request bodies, defined once (pydantic v2 models).

Both sides of the contract come from these models: the API (and the CLI's local check of a job)
validates with them, and ``/openapi.json`` is built from their JSON Schemas
(:mod:`emq.api.openapi`). A validation error becomes :class:`~emq.core.errors.InvalidInput`
naming the field as a client writes it: ``url``, ``headers.X-Trace``, ``retry.max_attempts``,
``jobs[3].url``.

What JSON Schema cannot say stays a domain check, run after the schema on the same path:
whether a URL can be sent (:mod:`emq.core.outbound`), headers EMQ sets itself or that repeat
in another case, sizes that are ``413`` and configurable (:class:`~emq.core.model.JobLimits`),
lone surrogates, ``max_delay_s >= base_delay_s``. Those are described in the schema's text.

Why pydantic: its errors carry the location as data (dict keys included, so a bad header is
``headers.X-A``), its JSON Schema output is OpenAPI 3.1's dialect, and its Rust core validates a
1000-job batch faster than the hand-written checks it replaces (docs/benchmarks.md).

Importing this package builds the validators (pydantic is imported here only); the core model
imports it lazily, when something is parsed, so ``emq --help`` does not pay for it.

Where each part lives: :mod:`~emq.core.schema.common` (patterns, limits, the strict bases),
:mod:`~emq.core.schema.jobs` (job bodies), :mod:`~emq.core.schema.topics` (tenants, topics,
dead-letter replay), :mod:`~emq.core.schema.queries` (query parameters),
:mod:`~emq.core.schema.validation` (parsing, and errors as ``InvalidInput``). This package
exports every public name.
"""

from pydantic import BaseModel

from emq.core.schema.common import (
    DEAD_LETTER_ID_PATTERN,
    HEADER_NAME_PATTERN,
    HEADER_VALUE_PATTERN,
    MAX_DELAY_S,
    MAX_KEY_CHARS,
    MAX_REPLAY,
    MAX_TENANT_DISPLAY_CHARS,
    NAME_PATTERN,
    URL_PATTERN,
    Body,
    IntegralBody,
    MethodName,
    Name,
    NamespaceName,
    NamespaceValue,
    PriorityModeName,
    PriorityName,
    Query,
)
from emq.core.schema.endpoints import EndpointEnableIn, EndpointsIn
from emq.core.schema.jobs import JobBatchIn, JobBodyValue, JobIn
from emq.core.schema.queries import DlqQuery, NamespaceQuery
from emq.core.schema.topics import (
    Burst,
    DeadLetterId,
    DlqMaxAge,
    DlqMaxEntries,
    EndpointConcurrency,
    MaxBacklog,
    Qps,
    ReplayIn,
    RetryIn,
    TenantIn,
    TenantPatch,
    TopicIn,
    TopicPatch,
    Weight,
)
from emq.core.schema.validation import as_invalid, field_name, given, query, validate

REQUEST_MODELS: tuple[type[BaseModel], ...] = (
    JobIn,
    JobBatchIn,
    TenantIn,
    TenantPatch,
    RetryIn,
    TopicIn,
    TopicPatch,
    ReplayIn,
    EndpointsIn,
    EndpointEnableIn,
)
QUERY_MODELS: tuple[type[Query], ...] = (NamespaceQuery, DlqQuery)

__all__ = [
    "DEAD_LETTER_ID_PATTERN",
    "HEADER_NAME_PATTERN",
    "HEADER_VALUE_PATTERN",
    "MAX_DELAY_S",
    "MAX_KEY_CHARS",
    "MAX_REPLAY",
    "MAX_TENANT_DISPLAY_CHARS",
    "NAME_PATTERN",
    "QUERY_MODELS",
    "REQUEST_MODELS",
    "URL_PATTERN",
    "Body",
    "Burst",
    "DeadLetterId",
    "DlqMaxAge",
    "DlqMaxEntries",
    "DlqQuery",
    "EndpointConcurrency",
    "EndpointEnableIn",
    "EndpointsIn",
    "IntegralBody",
    "JobBatchIn",
    "JobBodyValue",
    "JobIn",
    "MaxBacklog",
    "MethodName",
    "Name",
    "NamespaceName",
    "NamespaceQuery",
    "NamespaceValue",
    "PriorityModeName",
    "PriorityName",
    "Qps",
    "Query",
    "ReplayIn",
    "RetryIn",
    "TenantIn",
    "TenantPatch",
    "TopicIn",
    "TopicPatch",
    "Weight",
    "as_invalid",
    "field_name",
    "given",
    "query",
    "validate",
]
