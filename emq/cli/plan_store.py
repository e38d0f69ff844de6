"""``emq plan apply`` hands the plan it reviews to the API, which keeps the latest few for the
console (``GET /v1/plans/latest``: the report's figures and charts, the dry-run diff).

Best effort: a plan the API does not take (an older API without the route, a plan over the
request size limit) is a warning on stderr, never a reason not to apply.
"""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from emq.core.errors import EmqError

if TYPE_CHECKING:
    from emq.client import Client


async def publish(client: Client, path: str, source: str) -> str | None:
    """Send ``path`` (already read as a plan by ``load_plan``) as ``source``; its stored id, or
    None after printing why it was not stored."""
    from emq.client import describe

    try:
        document = json.loads(await asyncio.to_thread(Path(path).read_text))
        stored = await client.publish_plan(document, source)
    except (OSError, ValueError) as e:
        _warn(f"cannot read {path}: {e}")
        return None
    except EmqError as e:
        _warn(describe(e))
        return None
    return str(stored.get("id"))


def _warn(why: str) -> None:
    print(
        f"emq: warning: the plan was not stored in the API for the console ({why})", file=sys.stderr
    )
