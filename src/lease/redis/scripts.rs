//! The Redis lease store's steps, each one Lua script: Redis runs a script alone, so
//! every step is atomic, and every step reads the store's clock (`TIME`), never a
//! worker's. A pool is three keys sharing one hash tag (`{pool}`):
//!
//! - `…:def`, a hash: `capacity`, `partitions`, `generation`, `grant_after` (ms of the
//!   store's clock before which no lease is granted: see [`PRELUDE`]) and `run_id` (the
//!   server process that last granted);
//! - `…:leases`, a hash: partition → `generation:expires_ms:holder`;
//! - `…:members`, a hash: member → `heartbeat_ms:held:wants_more`.

use std::sync::LazyLock;

use redis::Script;

/// What every script shares: the keys, the clock, the parsers, and how a pool comes to be
/// defined.
///
/// Redis here may keep nothing on disk: a restart loses every lease at once while the
/// workers still hold theirs until their local deadlines (at most a ttl after their last
/// renewal, which was before the restart). So a pool defined while the server has been up
/// for less than a ttl grants nothing until a ttl after the server started, and a pool that
/// a worker knew and found gone (a restart, a flush) is defined again by that worker, one
/// generation on, granting nothing for a ttl from then: a lease granted before the loss
/// and one granted after never add up. Likewise a pool found on another server process
/// than the one that last granted (a restart from a snapshot, a promoted replica: either
/// may miss the last grants) grants nothing for a ttl.
const PRELUDE: &str = r#"
local def_key, leases_key, members_key = KEYS[1], KEYS[2], KEYS[3]
local function now_ms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
local function int(x) return string.format('%d', x) end
local function parse_lease(v)
  local g, e, h = string.match(v, '^(%d+):(%d+):(.*)$')
  return tonumber(g), tonumber(e), h
end
local function lease(g, e, h) return int(g) .. ':' .. int(e) .. ':' .. h end
local function definition()
  local d = redis.call('HMGET', def_key, 'capacity', 'partitions', 'generation', 'grant_after',
                       'run_id')
  if not d[1] then return nil end
  return {capacity = d[1], partitions = tonumber(d[2]), generation = tonumber(d[3]),
          grant_after = tonumber(d[4] or '0'), run_id = d[5]}
end
-- This server process: its run id (new at every start) and its uptime in seconds.
local function server()
  local info = redis.call('INFO', 'server')
  return string.match(info, 'run_id:(%w+)'), tonumber(string.match(info, 'uptime_in_seconds:(%d+)'))
end
local function after_start(now, ttl, up)
  -- Uptime is in whole seconds: a second more covers its rounding.
  local quiet = now - up * 1000 + ttl + 1000
  if quiet > now then return quiet end
  return 0
end
local function create(now, ttl, capacity, partitions, generation, quiet)
  local run_id, up = server()
  local after = after_start(now, ttl, up)
  if quiet and now + ttl > after then after = now + ttl end
  redis.call('HSET', def_key, 'capacity', capacity, 'partitions', partitions,
             'generation', generation, 'grant_after', int(after), 'run_id', run_id)
end
-- A pool this worker knew (ARGV[i..i+2]: capacity, partitions, generation; empty if it
-- knew none) and the store lost: defined again, one generation on. A pool another server
-- process wrote (restarted from a snapshot or an append-only file that may miss the last
-- grants, a replica promoted by a failover that may miss them too) grants nothing for a
-- ttl from now: a lease it lost may still be in use.
local function restored(now, ttl, i)
  local d = definition()
  if not d then
    if ARGV[i] == nil or ARGV[i] == '' then return nil end
    create(now, ttl, ARGV[i], ARGV[i + 1], tonumber(ARGV[i + 2]) + 1, true)
    return definition()
  end
  local run_id = server()
  if d.run_id ~= run_id then
    local after = math.max(d.grant_after, now + ttl)
    redis.call('HSET', def_key, 'grant_after', int(after), 'run_id', run_id)
    d.grant_after, d.run_id = after, run_id
  end
  return d
end
"#;

/// ARGV: capacity, partitions, ttl_ms. Defines the pool if it has no definition; returns
/// the stored one as {capacity, partitions, generation}.
const DEFINE: &str = r#"
local now = now_ms()
if redis.call('EXISTS', def_key) == 0 then
  create(now, tonumber(ARGV[3]), ARGV[1], ARGV[2], 1, false)
end
local d = definition()
return {d.capacity, d.partitions, d.generation}
"#;

/// No ARGV. The stored definition, or nil.
const DEFINITION: &str = r#"
local d = definition()
if not d then return false end
return {d.capacity, d.partitions, d.generation}
"#;

/// ARGV: capacity, partitions, ttl_ms. A new generation (the first if the pool had none).
const RESIZE: &str = r#"
local now = now_ms()
local d = definition()
if not d then
  create(now, tonumber(ARGV[3]), ARGV[1], ARGV[2], 1, false)
else
  redis.call('HSET', def_key, 'capacity', ARGV[1], 'partitions', ARGV[2],
             'generation', d.generation + 1)
end
d = definition()
return {d.capacity, d.partitions, d.generation}
"#;

/// ARGV: member, held, wants_more (0/1), ttl_ms, then what the worker knew of the pool
/// (3 values, empty if nothing). Records the member and returns the pool as seen from it:
/// {capacity, partitions, generation, active members, another waits (0/1), free, ms until
/// the pool grants again (0: it does)}; nil if
/// the pool has no definition and the worker knew none. Members unseen for ten ttls are
/// forgotten (a worker killed without leaving).
const HEARTBEAT: &str = r#"
local now, member, ttl = now_ms(), ARGV[1], tonumber(ARGV[4])
local d = restored(now, ttl, 5)
if not d then return false end
redis.call('HSET', members_key, member, int(now) .. ':' .. ARGV[2] .. ':' .. ARGV[3])
local active, others = 1, {}
local all = redis.call('HGETALL', members_key)
for i = 1, #all, 2 do
  if all[i] ~= member then
    local t, h, w = string.match(all[i + 1], '^(%d+):(%d+):(%d)$')
    t = tonumber(t)
    if t > now - ttl then
      active = active + 1
      others[#others + 1] = {tonumber(h), w == '1'}
    elseif t < now - 10 * ttl then
      redis.call('HDEL', members_key, all[i])
    end
  end
end
local fair = math.floor((d.partitions + active - 1) / active)
local waiting = 0
for _, m in ipairs(others) do
  if m[2] and m[1] < fair then waiting = 1 break end
end
local taken, older = 0, 0
for _, v in ipairs(redis.call('HVALS', leases_key)) do
  local g, e = parse_lease(v)
  if e > now then
    if g == d.generation then taken = taken + 1 else older = older + 1 end
  end
end
local free = 0
if older == 0 and now >= d.grant_after and d.partitions > taken then
  free = d.partitions - taken
end
local quiet = 0
if d.grant_after > now then quiet = d.grant_after - now end
return {d.capacity, d.partitions, d.generation, active, waiting, free, int(quiet)}
"#;

/// ARGV: member, generation, ttl_ms, a random number. One free partition of the pool's
/// current generation, chosen by the random number among the free ones; nil if none is
/// free, `generation` is not the pool's, a lease of another generation is unexpired, or
/// the pool grants nothing yet. Leases expired for a ttl are dropped on the way.
const ACQUIRE: &str = r#"
local now, member, ttl = now_ms(), ARGV[1], tonumber(ARGV[3])
local d = restored(now, ttl, #ARGV + 1)
if not d or d.generation ~= tonumber(ARGV[2]) or now < d.grant_after then return false end
local live = {}
local all = redis.call('HGETALL', leases_key)
for i = 1, #all, 2 do
  local g, e = parse_lease(all[i + 1])
  if e > now then
    if g ~= d.generation then return false end
    live[tonumber(all[i])] = true
  elseif e <= now - ttl then
    redis.call('HDEL', leases_key, all[i])
  end
end
local free = {}
for p = 0, d.partitions - 1 do
  if not live[p] then free[#free + 1] = p end
end
if #free == 0 then return false end
local p = free[(tonumber(ARGV[4]) % #free) + 1]
redis.call('HSET', leases_key, int(p), lease(d.generation, now + ttl, member))
return p
"#;

/// ARGV: member, ttl_ms, what the worker knew of the pool (3 values), then partitions.
/// Extends those the member still holds under the pool's generation (holding it is the
/// proof nobody else took it, even if it expired); returns them.
const RENEW: &str = r#"
local now, member, ttl = now_ms(), ARGV[1], tonumber(ARGV[2])
local d = restored(now, ttl, 3)
local kept = {}
if not d then return kept end
for i = 6, #ARGV do
  local v = redis.call('HGET', leases_key, ARGV[i])
  if v then
    local g, _, h = parse_lease(v)
    if h == member and g == d.generation then
      redis.call('HSET', leases_key, ARGV[i], lease(g, now + ttl, h))
      kept[#kept + 1] = tonumber(ARGV[i])
    end
  end
end
return kept
"#;

/// ARGV: member, then partitions. Deletes those the member holds.
const RELEASE: &str = r#"
for i = 2, #ARGV do
  local v = redis.call('HGET', leases_key, ARGV[i])
  if v then
    local _, _, h = parse_lease(v)
    if h == ARGV[1] then redis.call('HDEL', leases_key, ARGV[i]) end
  end
end
return 1
"#;

/// ARGV: member. Deletes its leases and its membership.
const LEAVE: &str = r#"
local all = redis.call('HGETALL', leases_key)
for i = 1, #all, 2 do
  local _, _, h = parse_lease(all[i + 1])
  if h == ARGV[1] then redis.call('HDEL', leases_key, all[i]) end
end
redis.call('HDEL', members_key, ARGV[1])
return 1
"#;

/// No ARGV. Every lease: {partition, holder, ms until it expires}.
const LEASES: &str = r#"
local now, out = now_ms(), {}
local all = redis.call('HGETALL', leases_key)
for i = 1, #all, 2 do
  local _, e, h = parse_lease(all[i + 1])
  out[#out + 1] = {tonumber(all[i]), h, int(e - now)}
end
return out
"#;

/// No ARGV. Every member: {member, held, wants more (0/1), ms since seen}.
const MEMBERS: &str = r#"
local now, out = now_ms(), {}
local all = redis.call('HGETALL', members_key)
for i = 1, #all, 2 do
  local t, h, w = string.match(all[i + 1], '^(%d+):(%d+):(%d)$')
  out[#out + 1] = {all[i], tonumber(h), tonumber(w), int(now - tonumber(t))}
end
return out
"#;

pub struct Scripts {
    pub define: Script,
    pub definition: Script,
    pub resize: Script,
    pub heartbeat: Script,
    pub acquire: Script,
    pub renew: Script,
    pub release: Script,
    pub leave: Script,
    pub leases: Script,
    pub members: Script,
}

pub static SCRIPTS: LazyLock<Scripts> = LazyLock::new(|| {
    let s = |body: &str| Script::new(&format!("{PRELUDE}{body}"));
    Scripts {
        define: s(DEFINE),
        definition: s(DEFINITION),
        resize: s(RESIZE),
        heartbeat: s(HEARTBEAT),
        acquire: s(ACQUIRE),
        renew: s(RENEW),
        release: s(RELEASE),
        leave: s(LEAVE),
        leases: s(LEASES),
        members: s(MEMBERS),
    }
});
