"""Pure, synchronous capacity formulas shared by the worker, the API and the Spark jobs."""

from capacity.split import DEFAULT_MAX_GROUP_QPS, group_count, kept_cap, split_quota

__all__ = ["DEFAULT_MAX_GROUP_QPS", "group_count", "kept_cap", "split_quota"]
