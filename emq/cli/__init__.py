"""The ``emq`` command line (``emq.cli.main``), one module per command group."""
