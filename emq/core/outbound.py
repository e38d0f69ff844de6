"""What can be sent: the checks of a job's URL, headers and text that the API and worker share.

A job accepted with 202 must be one the worker can put on the wire: if the API let through a URL
whose host fails IDNA encoding or a header value with a control character, the worker's HTTP
client would raise on every attempt. So the enqueue validation (:mod:`emq.core.model`) and the
worker's request preparation (:mod:`worker.push`) call the same functions here; a job that
passes at enqueue does not fail them in the worker. Jobs that bypass the API (written straight
into a queue) fail them in the worker instead and are dead-lettered with the reason.

Everything raises :class:`~emq.core.errors.InvalidInput` naming the field. The URL is parsed with
``yarl`` exactly as aiohttp parses it when it sends (``URL(text, encoded=False)``; yarl encodes
non-ASCII hosts with the ``idna`` package, UTS #46).
"""

from __future__ import annotations

import functools
import ipaddress
import re
import unicodedata

from yarl import URL

from emq.core.errors import InvalidInput

# C0 controls, space, DEL and C1 controls: never literal in a URL (RFC 3986), and the classic
# request-smuggling characters.
_URL_FORBIDDEN = re.compile(r"[\x00-\x20\x7f-\x9f]")
# Unicode categories refused anywhere in a URL: controls, invisible format characters (soft
# hyphen, zero-width joiners, bidi overrides: they make two URLs look alike), lone surrogates
# and every kind of space or line separator.
_URL_FORBIDDEN_CATEGORIES = frozenset({"Cc", "Cf", "Cs", "Zs", "Zl", "Zp"})
# A host as it goes to the resolver, after IDNA encoding: dot-separated labels of letters,
# digits, '-' and '_' (seen in real DNS names), with an optional final dot.
_HOST_LABEL = re.compile(r"[a-z0-9_-]{1,63}")
MAX_HOST_CHARS = 253
# RFC 9110 field values: no C0 control except HTAB, no DEL (aiohttp refuses the same set when
# it writes a request: "Forbidden control character detected in headers").
FIELD_VALUE_FORBIDDEN = r"\x00-\x08\x0a-\x1f\x7f"  # a character class's contents
_FIELD_VALUE_FORBIDDEN = re.compile(f"[{FIELD_VALUE_FORBIDDEN}]")
# RFC 9110 field names are tokens.
TOKEN = r"[!#$%&'*+\-.^_`|~0-9A-Za-z]+"
_TOKEN = re.compile(TOKEN)
URL_CACHE_SIZE = 4096  # a topic's jobs mostly share a few URLs


def utf8(value: str, field: str) -> bytes:
    """``value`` as UTF-8; a lone surrogate (``"\\ud800"`` decoded from JSON) is refused."""
    try:
        return value.encode()
    except UnicodeEncodeError:
        raise InvalidInput(
            field, "contains an unpaired surrogate (\\ud800-\\udfff), which is not valid text"
        ) from None


def check_text(value: str, field: str) -> str:
    """Refuse a string that cannot be stored or sent as UTF-8 (a lone surrogate)."""
    if not value.isascii():
        utf8(value, field)
    return value


@functools.lru_cache(maxsize=URL_CACHE_SIZE)
def push_url(text: str) -> URL:
    """Parse a job's URL as the worker sends it, or raise ``InvalidInput("url", why)``.

    Cached: parsing with IDNA costs several microseconds and jobs repeat their URLs.
    """
    _check_url_characters(text)
    try:
        url = URL(text, encoded=False)
        host = url.host  # decodes an IDNA ``xn--`` label: fails for an invalid one
        url.port  # noqa: B018 - fails on a malformed port
    except ValueError as e:  # UnicodeError included: the IDNA codec's failures
        raise InvalidInput("url", f"is not a valid URL: {e}") from None
    if url.scheme not in ("http", "https"):
        raise InvalidInput("url", f"scheme must be http or https, got {url.scheme!r}")
    if not host or not url.raw_host:
        raise InvalidInput("url", "must name a host")
    if url.user is not None or url.password is not None:
        raise InvalidInput("url", "must not carry credentials; send them in a header")
    _check_host(url.raw_host)
    return url


def _check_url_characters(text: str) -> None:
    if _URL_FORBIDDEN.search(text) or (
        not text.isascii()
        and any(unicodedata.category(c) in _URL_FORBIDDEN_CATEGORIES for c in text)
    ):
        raise InvalidInput(
            "url",
            "must not contain spaces, control characters, invisible format characters or "
            "unpaired surrogates",
        )


def _check_host(raw_host: str) -> None:
    """The encoded host must be an IP address or a name a resolver can be asked about."""
    if ":" in raw_host:
        try:
            if "%" in raw_host:  # a zone id ("%25eth0") names an interface of the worker's host
                raise ValueError(raw_host)
            ipaddress.IPv6Address(raw_host)
        except ValueError:
            raise InvalidInput("url", f"host {raw_host!r} is not a valid IPv6 address") from None
        return
    name = raw_host[:-1] if raw_host.endswith(".") else raw_host
    if len(name) > MAX_HOST_CHARS or not all(
        _HOST_LABEL.fullmatch(label) for label in name.split(".")
    ):
        raise InvalidInput("url", f"host {raw_host!r} is not a valid host name")


def check_header(name: object, value: object, field: str) -> None:
    """Refuse a header name that is not an RFC 9110 token, or a value HTTP cannot carry."""
    if not isinstance(name, str) or not _TOKEN.fullmatch(name):
        raise InvalidInput(field, "is not a valid header name")
    if not isinstance(value, str):
        raise InvalidInput(field, f"must be a string, got {type(value).__name__}")
    if _FIELD_VALUE_FORBIDDEN.search(value):
        raise InvalidInput(field, "must not contain control characters (other than tab) or DEL")
    check_text(value, field)
