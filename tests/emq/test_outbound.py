"""What the API accepts, the worker can send: emq.core.outbound, Job.parse and aiohttp's own checks.

The property tests generate hostile URLs and headers and assert that whatever ``Job.parse``
accepts passes the worker's URL preparation and aiohttp's header serialisation (both the C and
the pure-Python writer) without raising.
"""

from __future__ import annotations

import pytest
from aiohttp import http_writer
from hypothesis import given, settings
from hypothesis import strategies as st
from multidict import CIMultiDict

from emq.core.errors import InvalidInput
from emq.core.model import Job
from emq.core.outbound import push_url

POISON_URLS = [
    "http://xn--zz/",  # IDNA decoding fails
    "http://\u00ad/",  # a soft hyphen: IDNA maps it to nothing
    "http://a\u00adb.example/",
    "http://a\u200bb.example/",  # zero-width space
    "http://exa\u202emple.com/",  # right-to-left override
    "http://example.com/\x85",  # C1 control
    "http://example.com/a\u2028b",  # line separator
    "http://example.com/\u00a0",  # no-break space
    "http://example.com/\ud800",  # lone surrogate
    "http://\ud800.example/",
    "http://a%zz/",
    "http://a..b/",
    "http://" + "a" * 64 + ".example/",  # a label over 63 characters
    "http://[fe80::1%25eth0]/",  # a zone id
    "http://ex\x0bample.com/",
    "http://example.com:99999/",
    "http://user:pw@example.com/",
    "ftp://example.com/",
    "http:///x",
]


@pytest.mark.parametrize("url", POISON_URLS)
def test_unsendable_urls_are_refused_at_enqueue(url: str) -> None:
    with pytest.raises(InvalidInput) as info:
        Job.parse({"url": url})
    assert info.value.field == "url"


@pytest.mark.parametrize(
    "url",
    [
        "https://example.com/hook?a=1&b=%20",
        "http://münchen.example/ü?q=ß",
        "http://[2001:db8::1]:8080/",
        "http://93.184.216.34/",
        "http://example.com./",
        "http://my_host.example/",
        "HTTP://EXAMPLE.COM/",
    ],
)
def test_ordinary_urls_are_accepted(url: str) -> None:
    assert Job.parse({"url": url}).url == url


@pytest.mark.parametrize(
    ("headers", "field"),
    [
        ({"X-A": "a\x0bb"}, "headers.X-A"),
        ({"X-A": "a\x7f"}, "headers.X-A"),
        ({"X-A": "a\r\nInjected: 1"}, "headers.X-A"),
        ({"X-A": "\ud800"}, "headers.X-A"),
        ({"X-A\n": "a"}, "headers.X-A\n"),
        ({"X A": "a"}, "headers.X A"),
        ({"X-\u00e9": "a"}, "headers.X-\u00e9"),
        ({"": "a"}, "headers."),
    ],
)
def test_unsendable_headers_are_refused_at_enqueue(headers: dict[str, str], field: str) -> None:
    with pytest.raises(InvalidInput) as info:
        Job.parse({"url": "https://example.com/", "headers": headers})
    assert info.value.field == field


@pytest.mark.parametrize(
    ("job", "field"),
    [
        ({"body": "\ud800"}, "body"),
        ({"body": {"a": "\udfff"}}, "body"),
        ({"key": "k\ud800"}, "key"),
        ({"idempotency_key": "\ud800"}, "idempotency_key"),
    ],
)
def test_lone_surrogates_are_refused_naming_the_field(job: dict[str, object], field: str) -> None:
    with pytest.raises(InvalidInput) as info:
        Job.parse({"url": "https://example.com/"} | job)
    assert info.value.field == field


def test_a_body_nested_too_deeply_is_refused() -> None:
    body: object = "x"
    for _ in range(100_000):
        body = [body]
    with pytest.raises(InvalidInput) as info:
        Job.parse({"url": "https://example.com/", "body": body})
    assert info.value.field == "body"


# Characters that hostile URLs and headers are made of: ASCII, controls, format characters,
# surrogates, spaces of every kind and ordinary non-ASCII letters.
_HOSTILE = st.one_of(
    st.characters(min_codepoint=0, max_codepoint=0x7F),
    st.sampled_from("\x85\xa0\xad\u200b\u200d\u202e\u2028\u3000\ufeff\ud800\udfff.-_%:[]@"),
    st.characters(categories=("Ll", "Lu", "Mn", "Nd", "Cf", "Zs")),
)
_LABEL = st.text(
    st.one_of(
        st.sampled_from("abcxyz019-_"), st.characters(categories=("Ll", "Lu", "Mn")), _HOSTILE
    ),
    min_size=1,
    max_size=12,
)
_HOST = st.one_of(
    st.lists(_LABEL, min_size=1, max_size=4).map(".".join),
    st.text(_HOSTILE, max_size=20),
    st.sampled_from(["xn--zz", "xn--mnchen-3ya", "example.com", "[::1]", "1.2.3.4"]),
)
_PATH = st.text(_HOSTILE, max_size=20)
_TOKEN_OR_NOT = st.text(
    st.one_of(st.sampled_from("!#$%&'*+-.^_`|~aZ09"), _HOSTILE), min_size=0, max_size=8
)


def _worker_prepares(url_text: str, headers: dict[str, str]) -> None:
    """What the worker and aiohttp do with a job before any byte is sent."""
    url = push_url(url_text)
    all_headers = CIMultiDict(headers)
    all_headers["Host"] = url.host_port_subcomponent or ""
    status_line = f"POST {url.raw_path_qs} HTTP/1.1"
    http_writer._py_serialize_headers(status_line, all_headers)
    http_writer._serialize_headers(status_line, all_headers)


def _accepted(job: dict[str, object]) -> Job | None:
    try:
        return Job.parse(job)
    except InvalidInput:
        return None


@settings(max_examples=500, deadline=None)
@given(
    scheme=st.sampled_from(["http", "https", "HTTP"]),
    host=_HOST,
    port=st.one_of(st.none(), st.integers(0, 70000)),
    path=_PATH,
)
def test_a_url_accepted_at_enqueue_can_be_prepared_by_the_worker(
    scheme: str, host: str, port: int | None, path: str
) -> None:
    job = _accepted({"url": f"{scheme}://{host}{'' if port is None else f':{port}'}/{path}"})
    if job is not None:
        _worker_prepares(job.url, {})


@settings(max_examples=500, deadline=None)
@given(
    name=st.one_of(st.text(st.sampled_from("-_aZ09!#"), min_size=1, max_size=8), _TOKEN_OR_NOT),
    value=st.one_of(st.text(max_size=30), st.text(_HOSTILE, max_size=30)),
)
def test_headers_accepted_at_enqueue_can_be_written_by_aiohttp(name: str, value: str) -> None:
    job = _accepted({"url": "https://example.com/", "headers": {name: value}})
    if job is not None:
        _worker_prepares(job.url, dict(job.headers))
