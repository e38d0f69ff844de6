"""Backends behind the ``emq.interfaces`` seams: Redis (standalone and Cluster), in-memory."""
