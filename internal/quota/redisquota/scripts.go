package redisquota

import "github.com/redis/go-redis/v9"

// The scripts mirror quota.Local step for step (local.go, bucket.go); the
// shared conformance test runs the same cases against both. Redis runs a
// script atomically, which is what makes a check and its reservation one
// step for the whole fleet.
//
// Keys, per scope, all carrying the hash tag {q} so that a Redis Cluster
// keeps them on one shard (a script's keys must share a slot):
//
//	PREFIX:{q}:d:KIND:NAME:DAY   hash, the quota day starting at unix second DAY:
//	                             s (seeded), u/r tokens used/reserved,
//	                             cu/cr cost nanos used/reserved, f event flags;
//	                             expires a day after the quota day ends
//	PREFIX:{q}:b:KIND:NAME       hash, the per-minute buckets: rl/ra level and
//	                             time (µs) of requests_per_minute, tl/ta of
//	                             tokens_per_minute; expires 2 min after its last
//	                             use, when a bucket is full again anyway
//
// Numbers: Lua's are doubles, exact to 2^53. Bucket levels are in
// unit·µs (BucketUnit per request or token), at most 50M/min × 60M µs =
// 3e15; a refill adds at most twice that, so rates are capped at
// quota.MaxRedisRate. Times are the calling replica's clock (µs since the
// Unix epoch): replicas need synchronised clocks (NTP), as a skew of a
// few ms only moves a refill by as much, and a clock behind the last
// refill refills nothing.

// bucketLib is the bucket arithmetic of bucket.go.
const bucketLib = `
local W = 60000000
local function refill(level, at, limit, now)
  local el = now - at
  if el <= 0 then return level, at end
  at = now
  local cap = limit * W
  if level >= cap then return level, at end
  if el >= 2 * W then return cap, at end
  return math.min(cap, level + el * limit), at
end
local function adjust(level, limit, n)
  local cap = limit * W
  if n >= 2 * limit then return -cap end
  if n <= -2 * limit then return cap end
  return math.max(-cap, math.min(cap, level - n * W))
end
local function num(v) if v then return tonumber(v) end return nil end
`

// admitScript checks a request against every scope and, if all allow it,
// reserves it in all of them.
//
// KEYS: day key and bucket key of each scope, in turn.
// ARGV: now µs, n tokens, c cost nanos, day key expiry (unix s),
// seed (1: a scope with a daily limit whose day key has no s waits for
// its seed), k scopes, then per scope: daily_tokens, daily_cost, rpm,
// tpm, warn threshold tokens, warn threshold cost.
//
// Returns {-1, j} when scope j must be seeded first; otherwise {1
// admitted | 0 refused, 0} followed per scope by u, r, cu, cr, rpm
// level, tpm level, flags set by this call — after the reservation when
// admitted, as checked (refilled, nothing reserved) when refused.
var admitScript = redis.NewScript(bucketLib + `
local now, n, c = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
local expat, seed, k = ARGV[4], ARGV[5] == '1', tonumber(ARGV[6])
local S = {}
for j = 1, k do
  local b = 6 + (j - 1) * 6
  local s = {dt = tonumber(ARGV[b+1]), dc = tonumber(ARGV[b+2]), rpm = tonumber(ARGV[b+3]),
    tpm = tonumber(ARGV[b+4]), wt = tonumber(ARGV[b+5]), wc = tonumber(ARGV[b+6])}
  local d = redis.call('HMGET', KEYS[2*j-1], 's', 'u', 'r', 'cu', 'cr', 'f')
  if not d[1] and seed and (s.dt > 0 or s.dc > 0) then return {-1, j} end
  s.seeded = d[1] and true or false
  s.u, s.r, s.cu, s.cr, s.f = num(d[2]) or 0, num(d[3]) or 0, num(d[4]) or 0, num(d[5]) or 0, num(d[6]) or 0
  s.nf = 0
  local bk = redis.call('HMGET', KEYS[2*j], 'rl', 'ra', 'tl', 'ta')
  if s.rpm > 0 then
    local l, a = num(bk[1]), num(bk[2])
    if not l then l, a = s.rpm * W, now end
    s.rl, s.ra = refill(l, a, s.rpm, now)
  end
  if s.tpm > 0 then
    local l, a = num(bk[3]), num(bk[4])
    if not l then l, a = s.tpm * W, now end
    s.tl, s.ta = refill(l, a, s.tpm, now)
  end
  S[j] = s
end

-- The checks of Local.check; bad[j] lists the limits refusing for lack of
-- room (not the request being larger than the limit), which mark exceeded.
local refused = false
local function daily(cur, q, req)
  if req > q then return true, false end
  if cur >= q or cur + req > q then return true, true end
  return false, false
end
for j = 1, k do
  local s = S[j]
  s.room = {}
  if s.dt > 0 then
    local bad, room = daily(s.u + s.r, s.dt, n)
    refused = refused or bad
    if room then s.room[1] = true end
  end
  if s.dc > 0 then
    local bad, room = daily(s.cu + s.cr, s.dc, c)
    refused = refused or bad
    if room then s.room[2] = true end
  end
  if s.rpm > 0 and s.rl < W then
    refused = true
    s.room[4] = true
  end
  if s.tpm > 0 then
    if n > s.tpm then
      refused = true
    elseif n * W - s.tl > 0 then
      refused = true
      s.room[8] = true
    end
  end
end

local function flag(s, bit)
  if math.floor(s.f / bit) % 2 == 0 then
    s.f = s.f + bit
    s.nf = s.nf + bit
  end
end

for j = 1, k do
  local s = S[j]
  if refused then
    for _, bit in ipairs({1, 2, 4, 8}) do
      if s.room[bit] then flag(s, bit) end
    end
  else
    if s.dt > 0 then
      s.r = s.r + n
      if s.u + s.r >= s.wt then flag(s, 16) end
    end
    if s.dc > 0 then
      s.cr = s.cr + c
      if s.cu + s.cr >= s.wc then flag(s, 32) end
    end
    if s.rpm > 0 then s.rl = adjust(s.rl, s.rpm, 1) end
    if s.tpm > 0 then s.tl = adjust(s.tl, s.tpm, n) end
  end
end

local out = {refused and 0 or 1, 0}
for j = 1, k do
  local s = S[j]
  local dk, bk = KEYS[2*j-1], KEYS[2*j]
  local touched = s.nf > 0
  if not refused and (s.dt > 0 or s.dc > 0) then
    -- Only a scope with a daily limit was seeded above: marking another
    -- one seeded would keep a daily limit added later from loading the
    -- day's usage from the ledger.
    if s.dt > 0 then redis.call('HINCRBY', dk, 'r', n) end
    if s.dc > 0 then redis.call('HINCRBY', dk, 'cr', c) end
    if not s.seeded then redis.call('HSET', dk, 's', 1) end
    touched = true
  end
  if s.nf > 0 then redis.call('HSET', dk, 'f', s.f) end
  if touched then redis.call('EXPIREAT', dk, expat) end
  if s.rpm > 0 or s.tpm > 0 then
    if s.rpm > 0 then redis.call('HSET', bk, 'rl', s.rl, 'ra', s.ra) end
    if s.tpm > 0 then redis.call('HSET', bk, 'tl', s.tl, 'ta', s.ta) end
    redis.call('PEXPIRE', bk, 121000)
  end
  local rl, tl = s.rl or 0, s.tl or 0
  for _, v in ipairs({s.u, s.r, s.cu, s.cr, rl, tl, s.nf}) do out[#out+1] = v end
end
return out
`)

// commitScript replaces a reservation with actual usage, like Local's
// ticket.settle.
//
// KEYS: as admitScript (the admission day's day keys).
// ARGV: now µs, reserved tokens, reserved cost, actual tokens, actual
// cost, release rpm (1 on Cancel of a reserved request), daily (1: the
// request's day is still today, settle its daily counters), k, then per
// scope the six limits as admitScript.
//
// A day key without s (Redis lost it, or it expired) is left alone: its
// next admission seeds it from the ledger, which has this request.
// Returns per scope u, r, cu, cr, flags set by this call.
var commitScript = redis.NewScript(bucketLib + `
local now, rt, rc, at, ac = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4]), tonumber(ARGV[5])
local release, today, k = ARGV[6] == '1', ARGV[7] == '1', tonumber(ARGV[8])
local out = {}
for j = 1, k do
  local b = 8 + (j - 1) * 6
  local dt, dc, rpm, tpm, wt, wc = tonumber(ARGV[b+1]), tonumber(ARGV[b+2]), tonumber(ARGV[b+3]),
    tonumber(ARGV[b+4]), tonumber(ARGV[b+5]), tonumber(ARGV[b+6])
  local dk, bk = KEYS[2*j-1], KEYS[2*j]
  if (rpm > 0 and release) or tpm > 0 then
    local bv = redis.call('HMGET', bk, 'rl', 'ra', 'tl', 'ta')
    if rpm > 0 and release then
      local l, a = num(bv[1]), num(bv[2])
      if not l then l, a = rpm * W, now end
      l, a = refill(l, a, rpm, now)
      redis.call('HSET', bk, 'rl', adjust(l, rpm, -1), 'ra', a)
    end
    if tpm > 0 then
      local l, a = num(bv[3]), num(bv[4])
      if not l then l, a = tpm * W, now end
      l, a = refill(l, a, tpm, now)
      redis.call('HSET', bk, 'tl', adjust(l, tpm, at - rt), 'ta', a)
    end
    redis.call('PEXPIRE', bk, 121000)
  end
  local u, r, cu, cr, nf = 0, 0, 0, 0, 0
  if today and (dt > 0 or dc > 0) and redis.call('HEXISTS', dk, 's') == 1 then
    -- A reservation below zero means the key was lost and seeded again
    -- after this request was admitted: it was never reserved here.
    if dt > 0 then
      r = redis.call('HINCRBY', dk, 'r', 0 - rt)
      if r < 0 then redis.call('HSET', dk, 'r', 0); r = 0 end
      u = redis.call('HINCRBY', dk, 'u', at)
    end
    if dc > 0 then
      cr = redis.call('HINCRBY', dk, 'cr', 0 - rc)
      if cr < 0 then redis.call('HSET', dk, 'cr', 0); cr = 0 end
      cu = redis.call('HINCRBY', dk, 'cu', ac)
    end
    local f = num(redis.call('HGET', dk, 'f')) or 0
    local function flag(bit)
      if math.floor(f / bit) % 2 == 0 then f = f + bit; nf = nf + bit end
    end
    if dt > 0 then
      if u + r >= wt then flag(16) end
      if u + r > dt then flag(1) end
    end
    if dc > 0 then
      if cu + cr >= wc then flag(32) end
      if cu + cr > dc then flag(2) end
    end
    if nf > 0 then redis.call('HSET', dk, 'f', f) end
  end
  for _, v in ipairs({u, r, cu, cr, nf}) do out[#out+1] = v end
end
return out
`)

// seedScript installs a scope's usage recorded in the ledger on a day
// whose key has no s yet: only the first replica to seed a day counts, so
// racing replicas cannot count the ledger twice.
//
// KEYS: the day key. ARGV: tokens, cost nanos, expiry (unix s).
var seedScript = redis.NewScript(`
if redis.call('HSETNX', KEYS[1], 's', 1) == 1 then
  redis.call('HINCRBY', KEYS[1], 'u', ARGV[1])
  redis.call('HINCRBY', KEYS[1], 'cu', ARGV[2])
  redis.call('EXPIREAT', KEYS[1], ARGV[3])
  return {1}
end
return {0}
`)
