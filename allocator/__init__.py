"""Group assignment: consistent hashing over ZooKeeper membership, leader election, epochs.

Knows nothing of HTTP or Redis (the layering test enforces it).
"""
