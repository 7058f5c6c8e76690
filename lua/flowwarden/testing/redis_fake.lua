--[[
flowwarden.testing.redis_fake: an in-memory Redis for handler specs
(app.redis). One keyspace per connection name; the common commands of
strings, counters, hashes, sets and lists, expiry on the app's virtual clock,
MULTI/EXEC inside a pipeline, and EVAL of small scripts (run here, in Lua,
with redis.call on this fake). Anything else answers
"ERR unknown command", as a server does.

  local r = redis_fake.new { clock = function() return ms end }
  r:call(conn, cmd, args...)          -> reply, or nil, err (for the bridge)
  r:pipeline(conn, { {cmd, ...}, ... }) -> replies, or nil, err
  r:fail(cmd | "*", type [, { times = n, message = ... }])  the next calls of
                                       cmd raise that error type instead
  r.calls                              { { conn, cmd, args = {...} }, ... }
  r:get(conn, key)                     the stored value (string, table) or nil
]]

local M = {}

local Fake = {}
Fake.__index = Fake

local function err(prefix, text, etype)
  return { type = etype or "Redis.Error", message = prefix .. " " .. text,
           fields = { prefix = prefix } }
end

local WRONGTYPE = "Operation against a key holding the wrong kind of value"

function M.new(opts)
  opts = opts or {}
  return setmetatable({ clock = opts.clock or function() return 0 end, spaces = {}, calls = {},
                        failures = {} }, Fake)
end

-- The live entry { value, kind, expires } of key in conn's keyspace.
function Fake:_entry(conn, key)
  local space = self.spaces[conn]
  if not space then
    space = {}
    self.spaces[conn] = space
  end
  local e = space[key]
  if e and e.expires and e.expires <= self.clock() then
    space[key] = nil
    e = nil
  end
  return e, space
end

function Fake:get(conn, key)
  local e = self:_entry(conn, key)
  return e and e.value
end

local function int_arg(v)
  local n = math.tointeger(tonumber(v))
  if not n then
    return nil, err("ERR", "value is not an integer or out of range")
  end
  return n
end

local C = {}  -- command name -> function(fake, conn, args) -> reply | nil, err

function C.PING() return "PONG" end

function C.GET(f, conn, a)
  local e = f:_entry(conn, a[1])
  if e and e.kind ~= "string" then return nil, err("WRONGTYPE", WRONGTYPE) end
  return e and e.value
end

function C.SET(f, conn, a)
  local e, space = f:_entry(conn, a[1])
  local nx, xx, expires = false, false, nil
  local i = 3
  while a[i] do
    local o = tostring(a[i]):upper()
    if o == "NX" then nx = true
    elseif o == "XX" then xx = true
    elseif o == "EX" or o == "PX" then
      local n, e2 = int_arg(a[i + 1])
      if not n then return nil, e2 end
      expires = f.clock() + (o == "EX" and n * 1000 or n)
      i = i + 1
    else
      return nil, err("ERR", "syntax error")
    end
    i = i + 1
  end
  if (nx and e) or (xx and not e) then
    return nil
  end
  space[a[1]] = { value = tostring(a[2]), kind = "string", expires = expires }
  return "OK"
end

function C.SETNX(f, conn, a)
  return C.SET(f, conn, { a[1], a[2], "NX" }) and 1 or 0
end

function C.DEL(f, conn, a)
  local n = 0
  for _, k in ipairs(a) do
    local e, space = f:_entry(conn, k)
    if e then
      space[k] = nil
      n = n + 1
    end
  end
  return n
end

function C.EXISTS(f, conn, a)
  local n = 0
  for _, k in ipairs(a) do
    if f:_entry(conn, k) then n = n + 1 end
  end
  return n
end

function C.EXPIRE(f, conn, a)
  local e = f:_entry(conn, a[1])
  local n, e2 = int_arg(a[2])
  if not n then return nil, e2 end
  if not e then return 0 end
  e.expires = f.clock() + n * 1000
  return 1
end

function C.INCRBY(f, conn, a)
  local e, space = f:_entry(conn, a[1])
  if e and e.kind ~= "string" then return nil, err("WRONGTYPE", WRONGTYPE) end
  local cur, e2 = int_arg(e and e.value or 0)
  if not cur then return nil, e2 end
  local by, e3 = int_arg(a[2])
  if not by then return nil, e3 end
  local v = cur + by
  if e then e.value = tostring(v) else space[a[1]] = { value = tostring(v), kind = "string" } end
  return v
end

function C.INCR(f, conn, a) return C.INCRBY(f, conn, { a[1], 1 }) end
function C.DECR(f, conn, a) return C.INCRBY(f, conn, { a[1], -1 }) end
function C.DECRBY(f, conn, a)
  local n, e = int_arg(a[2])
  if not n then return nil, e end
  return C.INCRBY(f, conn, { a[1], -n })
end

function C.MGET(f, conn, a)
  local out = {}
  for i, k in ipairs(a) do
    local e = f:_entry(conn, k)
    out[i] = (e and e.kind == "string") and e.value or M.NULL
  end
  return out
end

-- A container of kind for key, created when create is set.
local function container(f, conn, key, kind, create)
  local e, space = f:_entry(conn, key)
  if e and e.kind ~= kind then return nil, err("WRONGTYPE", WRONGTYPE) end
  if not e and create then
    e = { value = {}, kind = kind }
    space[key] = e
  end
  return e
end

function C.HSET(f, conn, a)
  local e, x = container(f, conn, a[1], "hash", true)
  if not e then return nil, x end
  local n = 0
  for i = 2, #a, 2 do
    if e.value[a[i]] == nil then n = n + 1 end
    e.value[a[i]] = tostring(a[i + 1])
  end
  return n
end

function C.HGET(f, conn, a)
  local e, x = container(f, conn, a[1], "hash")
  if x then return nil, x end
  return e and e.value[a[2]]
end

function C.HDEL(f, conn, a)
  local e, x = container(f, conn, a[1], "hash")
  if x then return nil, x end
  local n = 0
  for i = 2, #a do
    if e and e.value[a[i]] ~= nil then
      e.value[a[i]] = nil
      n = n + 1
    end
  end
  return n
end

function C.HGETALL(f, conn, a)
  local e, x = container(f, conn, a[1], "hash")
  if x then return nil, x end
  local keys, out = {}, {}
  for k in pairs(e and e.value or {}) do keys[#keys + 1] = k end
  table.sort(keys)
  for _, k in ipairs(keys) do
    out[#out + 1] = k
    out[#out + 1] = e.value[k]
  end
  return out
end

function C.HINCRBY(f, conn, a)
  local e, x = container(f, conn, a[1], "hash", true)
  if not e then return nil, x end
  local cur, e2 = int_arg(e.value[a[2]] or 0)
  if not cur then return nil, e2 end
  local by, e3 = int_arg(a[3])
  if not by then return nil, e3 end
  e.value[a[2]] = tostring(cur + by)
  return cur + by
end

function C.SADD(f, conn, a)
  local e, x = container(f, conn, a[1], "set", true)
  if not e then return nil, x end
  local n = 0
  for i = 2, #a do
    if not e.value[a[i]] then
      e.value[a[i]] = true
      n = n + 1
    end
  end
  return n
end

function C.SREM(f, conn, a)
  local e, x = container(f, conn, a[1], "set")
  if x then return nil, x end
  local n = 0
  for i = 2, #a do
    if e and e.value[a[i]] then
      e.value[a[i]] = nil
      n = n + 1
    end
  end
  return n
end

function C.SISMEMBER(f, conn, a)
  local e, x = container(f, conn, a[1], "set")
  if x then return nil, x end
  return (e and e.value[a[2]]) and 1 or 0
end

function C.SMEMBERS(f, conn, a)
  local e, x = container(f, conn, a[1], "set")
  if x then return nil, x end
  local out = {}
  for k in pairs(e and e.value or {}) do out[#out + 1] = k end
  table.sort(out)
  return out
end

function C.SCARD(f, conn, a)
  return #C.SMEMBERS(f, conn, a)
end

local function push(f, conn, a, left)
  local e, x = container(f, conn, a[1], "list", true)
  if not e then return nil, x end
  for i = 2, #a do
    table.insert(e.value, left and 1 or #e.value + 1, tostring(a[i]))
  end
  return #e.value
end

function C.LPUSH(f, conn, a) return push(f, conn, a, true) end
function C.RPUSH(f, conn, a) return push(f, conn, a, false) end

function C.LLEN(f, conn, a)
  local e, x = container(f, conn, a[1], "list")
  if x then return nil, x end
  return e and #e.value or 0
end

function C.LRANGE(f, conn, a)
  local e, x = container(f, conn, a[1], "list")
  if x then return nil, x end
  local list = e and e.value or {}
  local from, to = int_arg(a[2]), int_arg(a[3])
  if not from or not to then return nil, err("ERR", "value is not an integer or out of range") end
  if from < 0 then from = #list + from end
  if to < 0 then to = #list + to end
  local out = {}
  for i = math.max(from, 0) + 1, math.min(to + 1, #list) do out[#out + 1] = list[i] end
  return out
end

-- A script's reply as Redis turns it: false -> nil, true -> 1, floats cut.
local function from_script(v)
  if v == false or v == nil then return nil end
  if v == true then return 1 end
  if type(v) == "number" then return math.tointeger(v) or math.floor(v) end
  if type(v) == "table" then
    if v.err then return nil, err(tostring(v.err):match("^(%S+)") or "ERR", v.err) end
    if v.ok then return v.ok end
    local out = {}
    for i = 1, #v do out[i] = from_script(v[i]) end
    return out
  end
  return v
end

function C.EVAL(f, conn, a)
  local nkeys, e = int_arg(a[2])
  if not nkeys then return nil, e end
  local keys, argv = {}, {}
  for i = 1, nkeys do keys[i] = a[2 + i] end
  for i = 3 + nkeys, #a do argv[#argv + 1] = tostring(a[i]) end
  local failure
  local redis = {
    call = function(cmd, ...)
      local r, x = f:_run(conn, cmd, { ... })
      if x then
        failure = x
        error(x.message, 0)
      end
      if r == nil or r == M.NULL then return false end
      return r
    end,
  }
  local env = setmetatable({ redis = redis, KEYS = keys, ARGV = argv }, { __index = _G })
  local chunk, why = load(tostring(a[1]), "=eval", "t", env)
  if not chunk then
    return nil, err("ERR", "Error compiling script: " .. tostring(why))
  end
  local ok, res = pcall(chunk)
  if not ok then
    return nil, failure or err("ERR", "Error running script: " .. tostring(res))
  end
  return from_script(res)
end

-- One command, without recording or injected failures.
function Fake:_run(conn, cmd, args)
  local fn = C[tostring(cmd):upper()]
  if not fn then
    return nil, err("ERR", string.format("unknown command '%s' (the fake has no such command)",
      tostring(cmd)))
  end
  return fn(self, conn, args)
end

-- The injected failure for cmd, if any is due.
function Fake:_failure(cmd)
  for i, fl in ipairs(self.failures) do
    if fl.cmd == "*" or fl.cmd == cmd then
      if fl.left then
        fl.left = fl.left - 1
        if fl.left <= 0 then table.remove(self.failures, i) end
      end
      return { type = fl.type, message = fl.message, fields = fl.fields }
    end
  end
end

function Fake:fail(cmd, etype, opts)
  opts = opts or {}
  table.insert(self.failures, 1, { cmd = tostring(cmd):upper(), type = etype,
    message = opts.message or ("injected " .. etype), left = opts.times,
    fields = { prefix = opts.prefix } })
  return self
end

function Fake:call(conn, cmd, ...)
  local args = { ... }
  cmd = tostring(cmd):upper()
  self.calls[#self.calls + 1] = { conn = conn, cmd = cmd, args = args }
  local injected = self:_failure(cmd)
  if injected then
    return nil, injected
  end
  return self:_run(conn, cmd, args)
end

-- MULTI ... EXEC inside the list queue their commands; EXEC runs them.
function Fake:pipeline(conn, commands)
  local out, queue = {}, nil
  for i, c in ipairs(commands) do
    local cmd = tostring(c[1]):upper()
    local args = table.move(c, 2, #c, 1, {})
    local r, e
    if cmd == "MULTI" then
      queue, r = {}, "OK"
    elseif cmd == "EXEC" and queue then
      r = {}
      for j, q in ipairs(queue) do
        local qr, qe = self:call(conn, q[1], table.unpack(q, 2))
        if qe then return nil, qe, i end
        r[j] = qr == nil and M.NULL or qr
      end
      queue = nil
    elseif queue then
      queue[#queue + 1] = c
      r = "QUEUED"
    else
      r, e = self:call(conn, cmd, table.unpack(args))
      if e then return nil, e, i end
    end
    out[i] = r == nil and M.NULL or r
  end
  return out
end

return M
