"""The tenant and admin HTTP API (aiohttp).

``make_app`` is imported on first use, so that ``from emq.api import ApiSettings`` (the CLI
reading its settings) does not import aiohttp.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from emq.api.settings import ApiSettings

if TYPE_CHECKING:
    from emq.api.app import make_app

__all__ = ["ApiSettings", "make_app"]


def __getattr__(name: str) -> Any:
    if name == "make_app":
        from emq.api.app import make_app

        return make_app
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
