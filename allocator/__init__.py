"""Group assignment: consistent hashing over ZooKeeper membership, leader election, epochs.

* :mod:`allocator.assign` — the pure assignment function (bounded-load consistent hashing on a
  uhashring ring, sticky to the previous assignment); :mod:`allocator.simulate` measures it.
* :mod:`allocator.document` — the ``/assignments`` document: generations, epochs, handovers.
* :mod:`allocator.election` and :mod:`allocator.leader` — one elected leader writes it, guarded.
* :mod:`allocator.fleet` — one worker's membership: ``FleetAssignment``, the worker's
  :class:`~emq.core.interfaces.AssignmentSource`, a thin coordinator of :mod:`allocator.membership`
  (session, running node, lease), :mod:`allocator.ownership` (the document and topics as
  snapshots), :mod:`allocator.releases` (release markers, awaited handovers) and
  :mod:`allocator.campaign` (election, the leader's term); :mod:`allocator.handover` — when a
  moved group may start on its new owner.
* :mod:`allocator.view` — the fleet as operators see it (``GET /v1/workers``).

Knows nothing of HTTP or Redis (the layering test enforces it). ZooKeeper is reached through the
kazoo seam :mod:`adapters.zk`, shared with the config store: the one module of ``adapters`` this
package may import.
"""
