"""Hostile-endpoint conformance of both push clients, continued: framing that ends at a close,
1xx, resets at every stage, malformed status lines, headers and framing (the invariants each
case is held to: :mod:`tests.worker.conformance.test_push_clients`)."""

from __future__ import annotations

import pytest

from tests.worker.conformance.cases import FRAMING_AND_MALFORMED, Case
from tests.worker.conformance.suite import check_case
from worker.pushers import HTTP_CLIENTS


@pytest.mark.parametrize("client", HTTP_CLIENTS)
@pytest.mark.parametrize("case", FRAMING_AND_MALFORMED, ids=[c.name for c in FRAMING_AND_MALFORMED])
async def test_a_malformed_or_cut_response_is_never_counted_as_delivered(
    case: Case, client: str
) -> None:
    await check_case(case, client)
