"""Backends behind the ``emq.core.interfaces`` seams: Redis (standalone and Cluster), ZooKeeper,
in-memory.

* Queues: :mod:`adapters.redis_queue` (a package, one module per role: producer, owner, delayed
  jobs, dead letters, each with its Lua; with :mod:`adapters.redis_conn` for connections and
  driver errors, :mod:`adapters.redis_replies` for script arguments and replies) and
  :mod:`adapters.memory_queue`; both implement every role of
  :class:`~emq.core.interfaces.QueueBackend`.
* Configuration: :mod:`adapters.zk_config` (its codec :mod:`adapters.zk_codec`, its cache
  :mod:`adapters.zk_mirror`) and :mod:`adapters.memory_config`.
* History: :mod:`adapters.redis_history`.
* :mod:`adapters.zk` — the one kazoo seam (clients with auth/ACLs, start/stop, session states,
  kazoo's results on the loop, error translation), shared with :mod:`allocator`.
"""
