from __future__ import annotations

import pytest

from emq.core import errors


def test_every_error_has_the_one_root_and_a_code() -> None:
    classes = [c for c in vars(errors).values() if isinstance(c, type) and issubclass(c, Exception)]
    assert len(classes) > 10
    for cls in classes:
        assert issubclass(cls, errors.EmqError), cls
        assert cls.code and cls.code.replace("_", "").isalpha(), cls


@pytest.mark.parametrize(
    ("cls", "stdlib"),
    [
        (errors.ConfigError, ValueError),
        (errors.InvalidInput, ValueError),
        (errors.NotFound, LookupError),
        (errors.BackendUnavailable, ConnectionError),
        (errors.DeliveryTimeout, TimeoutError),
    ],
)
def test_errors_are_also_the_stdlib_type_callers_expect(cls: type, stdlib: type) -> None:
    assert issubclass(cls, stdlib)


def test_invalid_input_names_its_field_and_can_be_prefixed() -> None:
    e = errors.PayloadTooLarge("body", "is larger than 10 bytes")
    assert str(e) == "body: is larger than 10 bytes"
    p = e.prefixed("jobs[3]")
    assert isinstance(p, errors.PayloadTooLarge)
    assert p.field == "jobs[3].body"
    assert errors.InvalidInput(None, "x").prefixed("jobs[0]").field == "jobs[0]"


def test_destination_refused_is_never_retryable() -> None:
    assert errors.DestinationRefused("10.0.0.1 is private").retryable is False
    assert errors.DeliveryError("boom", status=500).retryable is True
    assert errors.BacklogFull("full", retry_after_s=2.0).retry_after_s == 2.0
