from __future__ import annotations

import pytest

from emq.core.interfaces import ZERO_OFFSET, Offset


def test_offsets_parse_print_and_order_numerically() -> None:
    a = Offset.parse("1700000000000-2")
    assert str(a) == "1700000000000-2"
    assert ZERO_OFFSET < Offset.parse("9-0") < Offset.parse("10-0") < Offset.parse("10-1")


@pytest.mark.parametrize("text", ["", "1", "a-b", "1-2-3", "-1-0"])
def test_bad_offsets_are_refused(text: str) -> None:
    with pytest.raises(ValueError):
        Offset.parse(text)
