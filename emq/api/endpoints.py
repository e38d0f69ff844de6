"""The API's per-endpoint routes: re-enable an endpoint that workers disabled.

A re-enable is a mark in the topic's policy (``endpoints.enables``: the endpoint, or ``*``, and
when): every worker sees it through the topic watch and enables the endpoint if it was disabled
before the mark (:mod:`worker.endpoints`). What workers see of each endpoint comes back through
the :class:`~emq.core.endpoints.EndpointBoard` in ``GET`` topic (``endpoint_status``).
"""

from __future__ import annotations

import time
from dataclasses import replace
from typing import TYPE_CHECKING

from aiohttp import web

from emq.core import schema
from emq.core.endpoints import check_endpoint
from emq.core.model import Topic
from emq.core.schema.endpoints import EndpointEnableIn

if TYPE_CHECKING:
    from emq.api.app import Api


async def enable_endpoint(api: Api, request: web.Request) -> web.Response:
    """``POST .../endpoints/enable`` ``{"endpoint": "host:port" | "*"}`` (admin)."""
    await api.auth.admin(request)
    ref = api.topic_ref(request)
    body = schema.validate(EndpointEnableIn, await api._object(request))
    endpoint = check_endpoint(body.endpoint)
    at_ms = int(time.time() * 1000)

    def enabled(current: Topic) -> Topic:
        return replace(current, endpoints=current.endpoints.enabled(endpoint, at_ms))

    await api.config.get_topic(ref)  # 404 for an unknown topic
    topic = await api.config.update_topic(ref, enabled)
    return web.json_response(api.view(topic) | {"enabled": endpoint, "enabled_at": at_ms / 1000})
