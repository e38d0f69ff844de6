"""Rigs shared by the tests, ``emq bench`` and ``emq demo``: the one HTTP sink
(:mod:`emq.rigs.sink`) and the one process harness (:mod:`emq.rigs.procs`).

They ship in the wheel because ``emq bench`` and ``emq demo`` run them; helpers only the tests
need (fixtures, topic set-up, assertions) live in ``tests/``.
"""
