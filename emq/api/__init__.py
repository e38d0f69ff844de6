"""The tenant and admin HTTP API (aiohttp)."""

from emq.api.app import ApiSettings, make_app

__all__ = ["ApiSettings", "make_app"]
