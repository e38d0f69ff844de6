"""The ``emq`` command line, one module per command group.

* :mod:`emq.cli.main` — the parser and the entry point (``python -m emq``).
* :mod:`emq.cli.config` — reading the settings (the only place that reads the environment) and
  ``config show``.
* :mod:`emq.cli.common` — what the API commands share: the token, the client run, tables, flags.
* :mod:`emq.cli.tenants`, :mod:`emq.cli.topics`, :mod:`emq.cli.enqueue`, :mod:`emq.cli.dlq`,
  :mod:`emq.cli.fleet` — the API's commands; :mod:`emq.cli.history` — ``history``;
  :mod:`emq.cli.capacity` — ``plan`` (and ``bench plan``);
  :mod:`emq.cli.zk` — ``zk secure``; :mod:`emq.cli.services` — ``stack``, ``api``, ``worker``,
  ``demo``; :mod:`emq.cli.bench` — ``bench``.

Each module registers its parsers with ``add_commands`` and imports the heavy libraries (aiohttp,
kazoo, redis, pyspark, uvloop) inside its commands, so ``emq --help`` loads none of them.
"""
