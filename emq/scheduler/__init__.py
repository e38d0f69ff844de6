"""Firing schedules (issue 28, section 2): :mod:`emq.scheduler.firer` turns each due tick of
each schedule into one job; :mod:`emq.scheduler.settings` is its configuration
(``EMQ_SCHEDULER_*``)."""
