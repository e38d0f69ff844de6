"""The Python client of the EMQ HTTP API, for tenants and operators.

* :mod:`emq.client.client`: :class:`Client`, one method per route, answers as plain dicts.
* :mod:`emq.client.producer`: :class:`Producer`, ``await producer.send(job)`` in a loop, sent
  in batches (``send`` returns once the job is queued; ``flush``/``async with`` wait for the
  answers and raise :class:`JobsRejected` for the jobs not accepted).
* :mod:`emq.client.errors`: error responses as :mod:`emq.core.errors` classes.
* :mod:`emq.client.backoff`: :class:`Backoff`, the one retry policy (503, no answer, 429).

Example (the README's, which a test runs as a file)::

    client = Client(os.environ["EMQ_API_URL"], os.environ["EMQ_TOKEN"])
    async with client, client.producer("acme", "orders") as producer:
        for n in range(10_000):
            await producer.send({"url": "http://127.0.0.1:9/hook", "body": {"n": n}})
"""

from emq.client.backoff import Backoff
from emq.client.client import Client
from emq.client.errors import (
    ERRORS,
    ApiError,
    JobsRejected,
    Rejected,
    describe,
    error_from_response,
)
from emq.client.producer import Producer

__all__ = [
    "ERRORS",
    "ApiError",
    "Backoff",
    "Client",
    "JobsRejected",
    "Producer",
    "Rejected",
    "describe",
    "error_from_response",
]
