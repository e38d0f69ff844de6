"""Backends behind the ``emq.core.interfaces`` seams: Redis (standalone and Cluster), in-memory."""
