/**
 * The Lua scripts of the Redis store. Each store operation is one script, so it is atomic on the
 * server and one round trip. Expiry is the server's own (`PEXPIRE`, safety rule 1) and every
 * lease reply carries `PTTL`, the time left as the server sees it.
 *
 * Keys (P is the store's key prefix, `{tenure}:` by default; the braces are a Cluster hash tag so
 * every key of one store lives in one slot and a script may touch several of them):
 *   P lease:NAME   hash {owner, term, ttl, meta} with a TTL — exists only while the lease is live
 *   P term:NAME    integer, no TTL — the last term issued for NAME (survives expiry and release)
 *   P fence:NAME   integer, no TTL — the highest term a fenced write was accepted under
 *   P stream:NAME  Redis stream; entry ids are `SEQ-0`, so the id is the 1-based gap-free seq
 *   P names        sorted set of every lease name ever acquired, for list()
 *   P events:NAME  pub/sub channel: a lease line on takeover, an empty message on release
 *
 * Lease replies are {status, term, owner, ttl, pttl, meta}; a missing lease is {status}.
 */
import { LuaScript } from './driver.js';

/** Publish text for a new holder: owner, term, ttl and meta on lines (meta is JSON, so one line). */
const PUBLISH_LEASE = `redis.call('PUBLISH', ARGV[5], ARGV[2] .. '\\n' .. term .. '\\n' .. ARGV[3] .. '\\n' .. ARGV[4])`;

/**
 * KEYS: lease, term, names. ARGV: name, owner, ttlMs, meta, channel.
 * A free lease goes to owner with the next term (INCR of the term key, which never expires, so a
 * term never repeats while the server keeps its data); a live lease of the same owner is extended
 * with the same term; a live lease of another owner is reported.
 */
export const acquireScript = new LuaScript(
  'acquire',
  `
local f = redis.call('HMGET', KEYS[1], 'owner', 'term', 'ttl', 'meta')
if f[1] then
  if f[1] ~= ARGV[2] then
    return {0, tonumber(f[2]), f[1], tonumber(f[3]), redis.call('PTTL', KEYS[1]), f[4]}
  end
  redis.call('HSET', KEYS[1], 'ttl', ARGV[3], 'meta', ARGV[4])
  redis.call('PEXPIRE', KEYS[1], ARGV[3])
  return {1, tonumber(f[2]), f[1], tonumber(ARGV[3]), redis.call('PTTL', KEYS[1]), ARGV[4]}
end
local term = redis.call('INCR', KEYS[2])
redis.call('HSET', KEYS[1], 'owner', ARGV[2], 'term', term, 'ttl', ARGV[3], 'meta', ARGV[4])
redis.call('PEXPIRE', KEYS[1], ARGV[3])
redis.call('ZADD', KEYS[3], 0, ARGV[1])
${PUBLISH_LEASE}
return {1, term, ARGV[2], tonumber(ARGV[3]), redis.call('PTTL', KEYS[1]), ARGV[4]}
`,
);

/** KEYS: lease. ARGV: owner, term, ttlMs. Compare-and-set on owner and term (safety rule 6). */
export const renewScript = new LuaScript(
  'renew',
  `
local f = redis.call('HMGET', KEYS[1], 'owner', 'term', 'ttl', 'meta')
if not f[1] then return {0} end
if f[1] ~= ARGV[1] or tonumber(f[2]) ~= tonumber(ARGV[2]) then
  return {0, tonumber(f[2]), f[1], tonumber(f[3]), redis.call('PTTL', KEYS[1]), f[4]}
end
redis.call('HSET', KEYS[1], 'ttl', ARGV[3])
redis.call('PEXPIRE', KEYS[1], ARGV[3])
return {1, tonumber(f[2]), f[1], tonumber(ARGV[3]), redis.call('PTTL', KEYS[1]), f[4]}
`,
);

/**
 * KEYS: lease of each item. ARGV: owner, ttlMs, then the term of each item.
 * Renews every lease the owner holds live with the given term; replies one lease reply per item.
 */
export const renewManyScript = new LuaScript(
  'renewMany',
  `
local out = {}
for i, key in ipairs(KEYS) do
  local f = redis.call('HMGET', key, 'owner', 'term', 'ttl', 'meta')
  if not f[1] then
    out[i] = {0}
  elseif f[1] == ARGV[1] and tonumber(f[2]) == tonumber(ARGV[i + 2]) then
    redis.call('HSET', key, 'ttl', ARGV[2])
    redis.call('PEXPIRE', key, ARGV[2])
    out[i] = {1, tonumber(f[2]), f[1], tonumber(ARGV[2]), redis.call('PTTL', key), f[4]}
  else
    out[i] = {0, tonumber(f[2]), f[1], tonumber(f[3]), redis.call('PTTL', key), f[4]}
  end
end
return out
`,
);

/** KEYS: lease. ARGV: owner, term, channel. Deletes the live lease iff owner and term match; the term key stays. */
export const releaseScript = new LuaScript(
  'release',
  `
local f = redis.call('HMGET', KEYS[1], 'owner', 'term')
if f[1] == ARGV[1] and tonumber(f[2]) == tonumber(ARGV[2]) then
  redis.call('DEL', KEYS[1])
  redis.call('PUBLISH', ARGV[3], '')
  return 1
end
return 0
`,
);

/** KEYS: lease. */
export const readScript = new LuaScript(
  'read',
  `
local f = redis.call('HMGET', KEYS[1], 'owner', 'term', 'ttl', 'meta')
if not f[1] then return {0} end
return {1, tonumber(f[2]), f[1], tonumber(f[3]), redis.call('PTTL', KEYS[1]), f[4]}
`,
);

/**
 * KEYS: names. ARGV: lex min, lex max, lease key prefix, max names.
 * Flat reply: name, term, owner, ttl, pttl, meta for each live lease, in name (byte) order.
 */
export const listScript = new LuaScript(
  'list',
  `
local names = redis.call('ZRANGEBYLEX', KEYS[1], ARGV[1], ARGV[2], 'LIMIT', 0, tonumber(ARGV[4]))
local out = {}
for _, name in ipairs(names) do
  local key = ARGV[3] .. name
  local f = redis.call('HMGET', key, 'owner', 'term', 'ttl', 'meta')
  if f[1] then
    local pttl = redis.call('PTTL', key)
    if pttl > 0 then
      table.insert(out, name); table.insert(out, tonumber(f[2])); table.insert(out, f[1])
      table.insert(out, tonumber(f[3])); table.insert(out, pttl); table.insert(out, f[4])
    end
  end
end
return out
`,
);

/**
 * KEYS: fence, term, stream. ARGV: term, lease, payload.
 * The fence check and the write are one script (safety rule 5): a term below the highest accepted
 * is refused, a term above the last issued is refused, otherwise the high-water mark moves up and
 * the entry is added with the next sequence number.
 * Reply: {'ok', seq} | {'stale', highest} | {'unissued', issued}.
 */
export const appendScript = new LuaScript(
  'append',
  `
local term = tonumber(ARGV[1])
local highest = tonumber(redis.call('GET', KEYS[1]) or '0')
if term < highest then return {'stale', highest} end
local issued = tonumber(redis.call('GET', KEYS[2]) or '0')
if term > issued then return {'unissued', issued} end
if term > highest then redis.call('SET', KEYS[1], term) end
local seq = redis.call('XLEN', KEYS[3]) + 1
redis.call('XADD', KEYS[3], seq .. '-0', 'lease', ARGV[2], 'term', term, 'payload', ARGV[3])
return {'ok', seq}
`,
);
