"""The query parameters: text, read as the type given (``?limit=5``)."""

from __future__ import annotations

from typing import Annotated

from pydantic import Field

from emq.core.schema.common import DEAD_LETTER_ID_PATTERN, NamespaceName, Query


class NamespaceQuery(Query):
    namespace: NamespaceName | None = None


class DlqQuery(NamespaceQuery):
    limit: Annotated[int, Field(ge=1, le=1000)] = 100
    cursor: Annotated[
        str,
        Field(
            pattern=f"^$|{DEAD_LETTER_ID_PATTERN}",
            description="next_cursor of the previous page",
        ),
    ] = ""
