"""EMQ: a multi-tenant, rate-limited scheduler for HTTP push jobs.

The core of this package (``model``, ``errors``, ``naming``, ``settings``, ``interfaces``)
imports nothing else of EMQ's; the API, the client, the CLI and the composition root build on it.
"""

__version__ = "0.1.0"
