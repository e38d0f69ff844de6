"""The contract as an OpenAPI fuzzer found it broken (issue 13), pinned: the document and the
validator agree, public routes need no token, the server's limits are in the document, auth
comes before validation, and a 405 says which methods are allowed."""

from __future__ import annotations

from typing import Any

import jsonschema_rs
import pytest

from emq.api.openapi import spec
from emq.core import schema
from emq.core.errors import InvalidInput
from tests.api.conftest import Api

SCHEMAS = spec()["components"]["schemas"]


def documented(model: str, body: object) -> bool:
    """Whether ``body`` is valid for ``model`` by the served document."""
    root = {"$ref": f"#/components/schemas/{model}", "components": {"schemas": SCHEMAS}}
    return bool(jsonschema_rs.validator_for(root).is_valid(body))


def accepted(model: type[schema.Body], body: object) -> bool:
    try:
        schema.validate(model, body)
    except InvalidInput:
        return False
    return True


BODIES: list[tuple[type[schema.Body], Any, bool]] = [
    (schema.TopicIn, {"topic": "t", "qps": 5}, True),  # the body that could never validate
    (schema.TopicIn, {"topic": "t", "qps": 5, "namespace": "sandbox", "retry": {}}, True),
    (schema.TopicIn, {"topic": "t", "qps": 5, "paused": True}, False),
    (schema.TopicIn, {"qps": 5}, False),
    (schema.TopicIn, {"topic": "t", "qps": 0}, False),
    (schema.TopicIn, {"topic": "t", "qps": "5"}, False),
    (schema.TopicPatch, {}, False),
    (schema.TopicPatch, {"paused": True}, True),
    (schema.TopicPatch, {"paused": None}, False),
    (schema.TopicPatch, {"colour": "red"}, False),
    (schema.TopicPatch, {"retry": {"jitter": 2}}, False),
    (schema.JobIn, {"url": "https://e.com/"}, True),
    (schema.JobIn, {"url": "ftp://e.com/"}, False),
    (schema.JobIn, {"url": "https://e.com/", "key": ""}, False),
    (schema.JobIn, {"url": "https://e.com/", "key": "k" * 257}, False),
    (schema.JobIn, {"url": "https://e.com/", "delay_s": 2_592_000}, True),
    (schema.JobIn, {"url": "https://e.com/", "delay_s": 2_592_001}, False),
    (schema.JobIn, {"url": "https://e.com/", "headers": {"X A": "v"}}, False),
    (schema.JobIn, {"url": "https://e.com/", "headers": {"X-A": "a\nb"}}, False),
    (schema.JobIn, {"url": "https://e.com/", "surprise": 1}, False),
    (schema.JobBatchIn, {"jobs": []}, False),
    (schema.JobBatchIn, {"jobs": [{"url": "http://e.com"}]}, True),
    (schema.ReplayIn, {"ids": []}, False),
    (schema.ReplayIn, {"ids": ["0:1-0"]}, True),
    (schema.ReplayIn, {"ids": ["0"]}, False),
    (schema.ReplayIn, {"limit": 0}, False),
    (schema.TenantIn, {"tenant": "acme", "name": "x" * 201}, False),
]


@pytest.mark.parametrize(("model", "body", "valid"), BODIES)
def test_the_document_and_the_validator_agree(
    model: type[schema.Body], body: Any, valid: bool
) -> None:
    assert documented(model.__name__, body) is valid
    assert accepted(model, body) is valid


def test_public_routes_need_no_token_and_the_others_do() -> None:
    for path, ops in spec()["paths"].items():
        for method, op in ops.items():
            public = path in ("/healthz", "/metrics", "/openapi.json") or path.startswith("/ui")
            assert op["security"] == ([] if public else [{"bearer": []}]), (method, path)
            assert ("401" in op["responses"]) is not public


def test_every_request_body_refuses_unknown_fields() -> None:
    for model in schema.REQUEST_MODELS:
        assert SCHEMAS[model.__name__]["additionalProperties"] is False, model


def test_query_limits_are_documented() -> None:
    dlq = spec()["paths"]["/v1/tenants/{tenant}/topics/{topic}/dlq"]["get"]
    limit = next(p for p in dlq["parameters"] if p["name"] == "limit")
    assert (limit["schema"]["minimum"], limit["schema"]["maximum"]) == (1, 1000)


UNAUTHENTICATED = [
    ("POST", "/v1/tenants", {"tenant": "a/b"}),
    ("POST", "/v1/tenants/-a/topics", {"topic": "t{", "qps": 0}),
    ("GET", "/v1/tenants/-a/topics", None),
    ("GET", "/v1/tenants/-a/topics/-t?namespace=prod", None),
    ("PATCH", "/v1/tenants/-a/topics/-t", {}),
    ("POST", "/v1/tenants/-a/topics/-t/jobs", {"url": "ftp://x"}),
    ("GET", "/v1/tenants/-a/topics/-t/dlq?limit=0", None),
    ("GET", "/v1/topics?namespace=prod", None),
    ("POST", "/v1/tenants/-a/topics/-t/dlq/replay", {"ids": []}),
    ("GET", "/v1/workers?namespace=prod", None),
]


@pytest.mark.parametrize(("method", "path", "body"), UNAUTHENTICATED)
async def test_auth_comes_before_validation(api: Api, method: str, path: str, body: object) -> None:
    r = await api.client.request(method, path, json=body)
    assert r.status == 401, await r.text()
    assert (await r.json())["error"]["code"] == "unauthorized"


async def test_a_405_says_which_methods_are_allowed(api: Api) -> None:
    r = await api.client.delete("/v1/tenants/acme/topics/orders")
    assert r.status == 405
    assert set(r.headers["Allow"].split(",")) >= {"GET", "PATCH"}
    assert (await r.json())["error"]["code"] == "method_not_allowed"
