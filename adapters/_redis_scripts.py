"""The Lua scripts of :mod:`adapters.redis_queue`, one per operation that must be atomic.

Every script touches the keys of ONE slot only, so it never fails with CROSSSLOT: most take the
keys of one group (they share the group's hash tag); the batch scripts (APPEND, READ,
WRITE_CHECKPOINTS, TRIM_MANY) take the keys of many groups, which the caller gathers per Cluster
slot (on a standalone server, all in one call). Keys are always passed in ``KEYS``, never built
inside a script, so Redis Cluster can route the call. The two global keys (the ready signal and
the due index) are never given to a script: they live outside every group's hash tag.

Shared formats (spelled the same in :mod:`adapters.memory_queue`):

* a queue's stream entry has one field, ``d``, holding the job's payload;
* a delayed job is the sorted-set member ``<priority>|<payload>`` (``high|{...}``), scored by its
  due time in epoch milliseconds, so promotion knows which stream to append it to without
  decoding the payload (the payload carries the job id, so members are unique);
* a checkpoint is a hash ``{o: offset, e: epoch, n: committed}`` where ``n`` counts every entry
  ever committed, which makes backlog ``entries-added - n`` (see :data:`BACKLOG`);
* scripts guarded by the owner epoch return ``{0, current_epoch}`` when fenced and ``{1, result}``
  otherwise, so a fenced call changes nothing; the batch ones judge each item on its own and
  return the 1-based numbers of the fenced items (those changed nothing, the others applied).
"""

from __future__ import annotations

# Returns the current epoch when ARGV-given ``epoch`` is older, else false. Prepended to the
# scripts that are fenced; ``epoch_key`` is one of their KEYS.
_FENCE = """
local function fenced(epoch_key, epoch)
  local current = tonumber(redis.call('GET', epoch_key) or '0')
  if current > tonumber(epoch) then return current end
  return false
end
"""

# Offsets are compared as (ms, seq) pairs: as strings "9-0" would sort after "10-0".
_OFFSETS = """
local function split_id(id)
  local dash = string.find(id, '-', 1, true)
  return tonumber(string.sub(id, 1, dash - 1)), tonumber(string.sub(id, dash + 1))
end
local function id_after(id)
  local dash = string.find(id, '-', 1, true)
  return string.sub(id, 1, dash) .. string.format('%d', tonumber(string.sub(id, dash + 1)) + 1)
end
"""

# KEYS: streams  ARGV: (index into KEYS, payload) pairs -> the new offsets, in ARGV order
# Appends many plain jobs, to one or many queues of one slot, in one call: a batch of 1000 puts
# costs a few commands instead of 1000 (redis-py spends ~20 us of Python per pipelined command).
APPEND = """
local ids = {}
for i = 1, #ARGV, 2 do
  ids[#ids + 1] = redis.call('XADD', KEYS[tonumber(ARGV[i])], '*', 'd', ARGV[i + 1])
end
return ids
"""

# KEYS: streams  ARGV: per stream, the offset to read after and its count
# -> per stream, its next (up to its count) entries as one flat array: offset, payload, offset, ...
# (a payload is false if an entry has no field 'd'). XRANGE for many queues in one call: a
# fetch of 10 000 queues costs a few commands instead of 10 000, and the flat reply is much
# cheaper for redis-py to take apart than XRANGE's (offset, {field: value}) pairs.
READ = """
local out = {}
for i = 1, #KEYS do
  local flat = {}
  local entries = redis.call('XRANGE', KEYS[i], '(' .. ARGV[2 * i - 1], '+', 'COUNT', ARGV[2 * i])
  for _, entry in ipairs(entries) do
    local fields, payload = entry[2], false
    for f = 1, #fields, 2 do
      if fields[f] == 'd' then payload = fields[f + 1] end
    end
    flat[#flat + 1] = entry[1]
    flat[#flat + 1] = payload
  end
  out[i] = flat
end
return out
"""

# KEYS: stream, delayed, job_due[, idempotency]  ARGV: job_id, payload, due_ms or '', priority,
# window_s -> {0, offset} appended | {1, first_job_id} duplicate | {2, ''} parked in the delayed
# set (and its due time noted in job_due, so a status lookup finds it without a scan)
PUT = """
if #KEYS == 4 then
  -- SET NX GET (Redis >= 7.0): nil when the marker was set now, the first job id otherwise.
  local first = redis.call('SET', KEYS[4], ARGV[1], 'NX', 'GET', 'EX', ARGV[5])
  if first then return {1, first} end
end
if ARGV[3] ~= '' then
  redis.call('ZADD', KEYS[2], ARGV[3], ARGV[4] .. '|' .. ARGV[2])
  redis.call('HSET', KEYS[3], ARGV[1], ARGV[3])
  return {2, ''}
end
return {0, redis.call('XADD', KEYS[1], '*', 'd', ARGV[2])}
"""

# KEYS: epoch, holder  ARGV: epoch, holder -> {0, current} fenced | {1, previous holder or ''}
# The holder is the claiming worker process; it deletes it when it lets go cleanly
# (RELEASE_HOLDS), so a claim that finds another one knows its former holder may still push.
CLAIM = (
    _FENCE
    + """
local current = fenced(KEYS[1], ARGV[1])
if current then return {0, current} end
redis.call('SET', KEYS[1], ARGV[1])
local previous = redis.call('GET', KEYS[2]) or ''
if ARGV[2] == '' then redis.call('DEL', KEYS[2]) else redis.call('SET', KEYS[2], ARGV[2]) end
return {1, previous}
"""
)

# KEYS: holders  ARGV: holder -> how many were released (the ones ``holder`` still held)
RELEASE_HOLDS = """
local n = 0
for i = 1, #KEYS do
  if redis.call('GET', KEYS[i]) == ARGV[1] then
    redis.call('DEL', KEYS[i])
    n = n + 1
  end
end
return n
"""

# commit(checkpoint_key, epoch_key, stream_key, epoch, offset)
# -> {0, current} fenced | {1, entries newly committed}
# Counts the entries in (old, new] in pages so the count is exact however far the offset moved;
# a commit normally covers about a second of a <= 150 QPS queue.
_COMMIT = (
    _FENCE
    + _OFFSETS
    + """
local function commit(ckpt_key, epoch_key, stream_key, epoch, offset)
  local current = fenced(epoch_key, epoch)
  if current then return {0, current} end
  local old = redis.call('HMGET', ckpt_key, 'o', 'n')
  local from = '-'
  if old[1] then
    local ms, seq = split_id(old[1])
    local new_ms, new_seq = split_id(offset)
    if new_ms < ms or (new_ms == ms and new_seq <= seq) then return {1, 0} end
    from = '(' .. old[1]
  end
  local counted = 0
  while true do
    local page = redis.call('XRANGE', stream_key, from, offset, 'COUNT', 1000)
    counted = counted + #page
    if #page < 1000 then break end
    from = '(' .. page[#page][1]
  end
  local total = (tonumber(old[2]) or 0) + counted
  redis.call('HSET', ckpt_key, 'o', offset, 'e', epoch, 'n', string.format('%d', total))
  return {1, counted}
end
"""
)

# KEYS: (stream, checkpoint, epoch) per item, all of one slot  ARGV: one string, a line
# "<epoch> <offset>" per item (one argument instead of two per item: redis-py packs each
# argument in Python) -> the 1-based numbers of the items that were fenced (and changed
# nothing); the others are applied.
WRITE_CHECKPOINTS = (
    _COMMIT
    + """
local refused = {}
local i = 0
for epoch, offset in string.gmatch(ARGV[1], '(%S+) (%S+)') do
  local k = 3 * i
  i = i + 1
  local done = commit(KEYS[k + 2], KEYS[k + 3], KEYS[k + 1], epoch, offset)
  if done[1] == 0 then refused[#refused + 1] = i end
end
return refused
"""
)

# cut(stream_key, checkpoint_key, epoch_key, epoch, retain) -> {0, current} fenced | {1, removed}
# Only entries at or below the checkpoint go, and of those the newest ``retain`` stay: the
# exact (not ``~``) MINID is the oldest entry to keep, or the id right after the checkpoint.
_CUT = (
    _FENCE
    + _OFFSETS
    + """
local function cut(stream_key, ckpt_key, epoch_key, epoch, retain_arg)
  local current = fenced(epoch_key, epoch)
  if current then return {0, current} end
  local committed = redis.call('HGET', ckpt_key, 'o')
  if not committed then return {1, 0} end
  local retain = tonumber(retain_arg)
  local minid = id_after(committed)
  if retain > 0 then
    local kept = redis.call('XREVRANGE', stream_key, committed, '-', 'COUNT', retain)
    if #kept < retain then return {1, 0} end
    minid = kept[#kept][1]
  end
  return {1, redis.call('XTRIM', stream_key, 'MINID', '=', minid)}
end
"""
)

# KEYS: (stream, checkpoint, epoch) per item, all of one slot  ARGV: one string, a line
# "<epoch> <retain>" per item -> the 1-based numbers of the items that were fenced (and
# changed nothing); the others are applied.
TRIM_MANY = (
    _CUT
    + """
local refused = {}
local i = 0
for epoch, retain in string.gmatch(ARGV[1], '(%S+) (%S+)') do
  local k = 3 * i
  i = i + 1
  local done = cut(KEYS[k + 1], KEYS[k + 2], KEYS[k + 3], epoch, retain)
  if done[1] == 0 then refused[#refused + 1] = i end
end
return refused
"""
)

# KEYS: stream, checkpoint  ARGV: -  -> entries after the checkpoint
# ``entries-added`` (Redis >= 7.0) counts every XADD ever, trims and deletes included, and the
# checkpoint counts every entry committed, so their difference survives trimming. Run in Lua so
# the first/last entries XINFO returns never cross the network.
BACKLOG = """
if redis.call('EXISTS', KEYS[1]) == 0 then return 0 end
local info = redis.call('XINFO', 'STREAM', KEYS[1])
local added
for i = 1, #info, 2 do
  if info[i] == 'entries-added' then added = info[i + 1] break end
end
if not added then return redis.error_reply('EMQ needs Redis >= 7.0 (XINFO entries-added)') end
local backlog = added - tonumber(redis.call('HGET', KEYS[2], 'n') or '0')
if backlog < 0 then return 0 end
return backlog
"""

# Maps a priority name to its stream: KEYS[2..4] are always the high, medium, low streams.
_STREAMS = """
local streams = {high = KEYS[2], medium = KEYS[3], low = KEYS[4]}
"""

# KEYS: delayed, high, medium, low, job_due  ARGV: now_ms, limit -> how many were moved
# (a promoted job's due time leaves job_due: its id is the payload's first field)
PROMOTE_DUE = (
    _STREAMS
    + """
local due = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', ARGV[1], 'LIMIT', 0, ARGV[2])
local moved = 0
for _, member in ipairs(due) do
  local bar = string.find(member, '|', 1, true)
  local stream = bar and streams[string.sub(member, 1, bar - 1)]
  if stream then
    redis.call('XADD', stream, '*', 'd', string.sub(member, bar + 1))
    redis.call('ZREM', KEYS[1], member)
    local id = string.match(member, '^[a-z]+|{"id":"([^"]+)"')
    if id and KEYS[5] then redis.call('HDEL', KEYS[5], id) end
    moved = moved + 1
  end
end
return moved
"""
)

# KEYS: delayed, epoch  ARGV: epoch, then (due_ms, member) per job -> {0, current} fenced |
# {1, parked}. A member already parked keeps one entry (ZADD moves it to the new due time), so
# re-sending a schedule that failed half-way parks nothing twice.
SCHEDULE = (
    _FENCE
    + """
local current = fenced(KEYS[2], ARGV[1])
if current then return {0, current} end
local n = 0
for i = 2, #ARGV, 2 do
  redis.call('ZADD', KEYS[1], ARGV[i], ARGV[i + 1])
  n = n + 1
end
return {1, n}
"""
)

# KEYS: delayed sets (of one slot)  ARGV: -  -> per set, the due time of its earliest job as a
# string, or '' when it is empty. In Lua so the members (whole payloads) never cross the network.
EARLIEST_DUE = """
local out = {}
for i = 1, #KEYS do
  local first = redis.call('ZRANGE', KEYS[i], 0, 0, 'WITHSCORES')
  out[i] = first[2] or ''
end
return out
"""

# Trims a DLQ to its retention (exactly: a DLQ takes few writes, and an approximate trim keeps
# whole stream nodes, so a small DLQ would never age out). Ages by the server's clock, the one
# its '*' ids come from. -> how many letters were removed
_TRIM_DEAD = """
local function trim_dead(dlq, max_entries, max_age_ms)
  local t = redis.call('TIME')
  local min_ms = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000) - max_age_ms
  local n = redis.call('XTRIM', dlq, 'MAXLEN', '=', max_entries)
  if min_ms > 0 then n = n + redis.call('XTRIM', dlq, 'MINID', '=', min_ms) end
  return n
end
"""

# KEYS: dlq, epoch  ARGV: epoch, max_entries, max_age_ms, then 6 per letter: priority, payload,
# error, status, attempts, failed_at -> {0, current} fenced | {1, appended}
DEAD_LETTER = (
    _FENCE
    + _TRIM_DEAD
    + """
local current = fenced(KEYS[2], ARGV[1])
if current then return {0, current} end
local n = 0
for i = 4, #ARGV, 6 do
  redis.call('XADD', KEYS[1], '*', 'priority', ARGV[i], 'payload', ARGV[i + 1],
    'error', ARGV[i + 2], 'status', ARGV[i + 3], 'attempts', ARGV[i + 4],
    'failed_at', ARGV[i + 5])
  n = n + 1
end
trim_dead(KEYS[1], tonumber(ARGV[2]), tonumber(ARGV[3]))
return {1, n}
"""
)

# KEYS: dlq, epoch  ARGV: epoch, max_entries, max_age_ms -> how many letters were removed
# (fenced: a deposed owner, holding an older topic configuration maybe, removes nothing)
TRIM_DEAD = (
    _FENCE
    + _TRIM_DEAD
    + """
if fenced(KEYS[2], ARGV[1]) then return 0 end
return trim_dead(KEYS[1], tonumber(ARGV[2]), tonumber(ARGV[3]))
"""
)

# KEYS: dlq, high, medium, low  ARGV: limit[, id...] -> how many were moved
# Each letter is appended to its stream and deleted from the DLQ before the next is looked up,
# so an id given twice is moved once.
REPLAY_DEAD = (
    _STREAMS
    + """
local limit = tonumber(ARGV[1])
local function move(letter)
  local fields = {}
  for i = 1, #letter[2], 2 do fields[letter[2][i]] = letter[2][i + 1] end
  local stream = streams[fields['priority']]
  if not stream or not fields['payload'] then return 0 end
  redis.call('XADD', stream, '*', 'd', fields['payload'])
  redis.call('XDEL', KEYS[1], letter[1])
  return 1
end
local moved = 0
if #ARGV > 1 then
  for i = 2, #ARGV do
    if moved >= limit then break end
    local found = redis.call('XRANGE', KEYS[1], ARGV[i], ARGV[i])
    if #found > 0 then moved = moved + move(found[1]) end
  end
else
  for _, letter in ipairs(redis.call('XRANGE', KEYS[1], '-', '+', 'COUNT', limit)) do
    moved = moved + move(letter)
  end
end
return moved
"""
)

ALL = (
    APPEND,
    PUT,
    CLAIM,
    RELEASE_HOLDS,
    WRITE_CHECKPOINTS,
    TRIM_MANY,
    BACKLOG,
    PROMOTE_DUE,
    SCHEDULE,
    EARLIEST_DUE,
    DEAD_LETTER,
    REPLAY_DEAD,
)
