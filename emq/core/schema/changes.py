"""The change log's query parameters (``GET /v1/changes``, ``POST /v1/changes/{change}/revert``).

Part of :mod:`emq.core.schema` (whose rules and messages they share); the OpenAPI document takes
them from the route table like the others.
"""

from __future__ import annotations

from typing import Annotated

from pydantic import Field

from emq.core.changes import CHANGE_ID_PATTERN
from emq.core.schema.common import Name, NamespaceName, Query

MAX_PAGE = 200


class ChangesQuery(Query):
    namespace: NamespaceName | None = Field(
        default=None, description="only this namespace's changes (default: every namespace)"
    )
    tenant: Name | None = None
    topic: Name | None = Field(default=None, description="only this topic's changes")
    since: (
        Annotated[
            float, Field(ge=0, le=4_102_444_800, description="epoch seconds: changes from then on")
        ]
        | None
    ) = None
    limit: Annotated[int, Field(ge=1, le=MAX_PAGE)] = 50
    cursor: Annotated[
        str,
        Field(
            pattern=f"^$|{CHANGE_ID_PATTERN}",
            description="next_cursor of the previous page",
        ),
    ] = ""


class RevertQuery(Query):
    force: bool = Field(
        default=False,
        description="revert even if the fields have changed since (their values now are not "
        "the change's after)",
    )
