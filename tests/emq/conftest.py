"""The API fixtures (a real loopback server over real Redis and ZooKeeper) for the client and CLI
tests, shared with ``tests/api``."""

from tests.api.conftest import api, snapshot  # noqa: F401  (re-exported fixtures)
