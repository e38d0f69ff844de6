"""What the Lua scripts of :mod:`adapters.redis_queue` share: rules, formats, common functions.

Each script lives with the role that runs it (:mod:`~adapters.redis_queue.producer`,
:mod:`~adapters.redis_queue.owner`, :mod:`~adapters.redis_queue.delayed`,
:mod:`~adapters.redis_queue.dead_letters`), one per operation that must be atomic.

Every script touches the keys of ONE slot only, so it never fails with CROSSSLOT: most take the
keys of one group (they share the group's hash tag); the batch scripts (APPEND, READ,
WRITE_CHECKPOINTS, TRIM_MANY) take the keys of many groups, which the caller gathers per Cluster
slot (on a standalone server, all in one call). Keys are always passed in ``KEYS``, never built
inside a script, so Redis Cluster can route the call. The two global keys (the ready signal and
the due index) are never given to a script: they live outside every group's hash tag. One
exception, standalone only: the claim stamps its former holder's taken key, which it can name
only once it has read the holder (see ``owner.CLAIM``; on a Cluster it is not done).

Shared formats (spelled the same in :mod:`adapters.memory_queue`):

* a queue's stream entry has one field, ``d``, holding the job's payload;
* a delayed job is the sorted-set member ``<priority>|<payload>`` (``high|{...}``), scored by its
  due time in epoch milliseconds, so promotion knows which stream to append it to without
  decoding the payload (the payload carries the job id, so members are unique);
* a checkpoint is a hash ``{o: offset, e: epoch, n: committed}`` where ``n`` counts every entry
  ever committed, which makes backlog ``entries-added - n`` (see the producer's ``BACKLOG``);
* scripts guarded by the owner epoch return ``{0, current_epoch}`` when fenced and ``{1, result}``
  otherwise, so a fenced call changes nothing; the batch ones judge each item on its own and
  return the 1-based numbers of the fenced items (those changed nothing, the others applied).
"""

from __future__ import annotations

# Returns the current epoch when ARGV-given ``epoch`` is older, else false. Prepended to the
# scripts that are fenced; ``epoch_key`` is one of their KEYS.
FENCE = """
local function fenced(epoch_key, epoch)
  local current = tonumber(redis.call('GET', epoch_key) or '0')
  if current > tonumber(epoch) then return current end
  return false
end
"""

# Offsets are compared as (ms, seq) pairs: as strings "9-0" would sort after "10-0".
OFFSETS = """
local function split_id(id)
  local dash = string.find(id, '-', 1, true)
  return tonumber(string.sub(id, 1, dash - 1)), tonumber(string.sub(id, dash + 1))
end
local function id_after(id)
  local dash = string.find(id, '-', 1, true)
  return string.sub(id, 1, dash) .. string.format('%d', tonumber(string.sub(id, dash + 1)) + 1)
end
"""


# Maps a priority name to its stream: KEYS[2..4] are always the high, medium, low streams.
STREAMS = """
local streams = {high = KEYS[2], medium = KEYS[3], low = KEYS[4]}
"""
