--[[
flowwarden.testing.sandbox: what flowwarden.testing changes in each Lua state
that runs a script under test, before the script loads (src/runtime/
test_bridge.c calls install). The script itself is untouched and loads as
run loads it.

  install {
    bridge_raw, bridge_call,  C functions reaching the spec's fakes: the
                              arguments go as BSON, so no Lua value is shared
    now_ms,                   the app's virtual clock
    real_mongo,               true: fw.mongo stays the real one (opts.mongo)
    make_cursor_key, http_transport_key,   registry fields the C side reads
    env,                      the spec's opts.env (name -> value)
  }

  - fw.mongo.collection(db, name [, opts]) returns a handle whose methods run
    on the spec's app.mongo (flowwarden.testing.mongo_fake); find and
    aggregate return a cursor over the documents the fake gave.
  - fw.http requests go to the spec's stubs (app.http), after fw.http's own
    argument and allow_hosts checks.
  - fw.redis and fw.pg run on the spec's app.redis (an in-memory Redis) and
    app.pg (a recorder of statements with scripted answers).
  - exactly_once streams: each call of a handler (not on_error) runs in a
    transaction of the fake (mongo_fake's txn): its fw.mongo writes on
    "default" (or on the MongoDB connection exactly_once = { connection =
    name } names) are kept only when it returns without ctx:send_to_dlq, as
    production commits them; a failed call's writes are not visible.
  - fw.date() without an argument is the virtual clock's now.
  - fw.env reads opts.env only.
]]

local M = {}

local CURSOR_NAME = "flowwarden.mongo.cursor"
local METHODS = { "find_one", "find", "aggregate", "count", "insert_one", "insert_many",
  "update_one", "update_many", "replace_one", "delete_one", "delete_many",
  "find_one_and_update", "bulk_write" }

-- A cursor over documents already fetched: the interface of fw.mongo's.
local function make_cursor(docs)
  local pos, closed = 1, false
  local cursor = {}
  local function next_doc()
    if closed then
      error("fw.mongo: cursor is closed", 2)
    end
    local d = docs[pos]
    if d ~= nil then
      pos = pos + 1
    end
    return d
  end
  function cursor.next(_) return next_doc() end
  function cursor.to_array(_)
    local out = {}
    for d in next_doc do
      out[#out + 1] = d
    end
    return out
  end
  function cursor.close(_) closed = true end
  return setmetatable(cursor, {
    __name = CURSOR_NAME,
    __call = function() return next_doc() end,
    __close = function() closed = true end,
    __tostring = function() return "fw.mongo.cursor(test fake)" end,
    __metatable = false,
  })
end

local function arg_error(fw, level, fmt, ...)
  local e = fw.error("ArgumentError", string.format(fmt, ...))
  local info = debug.getinfo(level + 1, "Sl")
  if info and info.currentline and info.currentline > 0 then
    e.where = info.short_src .. ":" .. info.currentline
  end
  error(e, 0)
end

local function mongo_proxy(fw, call)
  local handle_mt = { __name = "flowwarden.mongo.collection", __metatable = false }
  local methods = {}
  handle_mt.__index = methods
  handle_mt.__tostring = function(h)
    return string.format("fw.mongo.collection(%s.%s, connection %s)", h[1], h[2],
      h[3] and h[3].connection or "default")
  end
  for _, name in ipairs(METHODS) do
    -- A tail call: a typed error the fake raises names the handler's line.
    methods[name] = function(h, ...)
      return call("mongo", name, h[1], h[2], h[3], ...)
    end
  end
  local api = {}
  function api.collection(db, name, opts)
    if type(db) ~= "string" then
      arg_error(fw, 2, "fw.mongo.collection: database must be a string, got %s", type(db))
    end
    if type(name) ~= "string" then
      arg_error(fw, 2, "fw.mongo.collection: name must be a string, got %s", type(name))
    end
    if opts ~= nil and type(opts) ~= "table" then
      arg_error(fw, 2, "fw.mongo.collection: options must be a table, got %s", type(opts))
    end
    return setmetatable({ db, name, opts }, handle_mt)
  end
  return api
end

-- fw.redis and fw.pg on the spec's app.redis and app.pg. The connection
-- must be declared with the right scheme, as in run; calls are tail calls,
-- so a typed error names the handler's line.
local function store_check(fw, what, conn, kind)
  local config = require("flowwarden.config")
  if type(conn) ~= "string" then
    arg_error(fw, 3, "%s: the connection name must be a string, got %s", what, type(conn))
  end
  local ok, why = config.store_connection(conn, kind)
  if not ok then
    arg_error(fw, 3, "%s: %s", what, why)
  end
end

local function redis_proxy(fw, call)
  local api = {}
  function api.call(conn, cmd, ...)
    store_check(fw, "fw.redis", conn, "redis")
    return call("redis", conn, "call", cmd, ...)
  end
  function api.pipeline(conn, commands)
    store_check(fw, "fw.redis", conn, "redis")
    return call("redis", conn, "pipeline", commands)
  end
  return api
end

-- params with nil holes: fw.null keeps their places across the bridge.
local function dense(fw, params)
  if params == nil then
    return {}
  end
  local n, out = 0, {}
  for k in pairs(params) do
    if math.type(k) == "integer" and k > n then n = k end
  end
  for i = 1, n do
    local v = params[i]
    if v == nil then v = fw.null end
    out[i] = v
  end
  return out
end

local function pg_proxy(fw, call)
  local api = {}
  function api.query(conn, sql, params)
    store_check(fw, "fw.pg", conn, "postgresql")
    return call("pg", conn, "query", sql, dense(fw, params))
  end
  function api.execute(conn, sql, params)
    store_check(fw, "fw.pg", conn, "postgresql")
    return call("pg", conn, "execute", sql, dense(fw, params))
  end
  function api.execute_many(conn, sql, rows)
    store_check(fw, "fw.pg", conn, "postgresql")
    if type(rows) ~= "table" then
      arg_error(fw, 3, "fw.pg.execute_many: rows must be a list of parameter lists, got "
        .. type(rows))
    end
    local list = {}
    for i = 1, #rows do
      if type(rows[i]) ~= "table" then
        arg_error(fw, 3, string.format(
          "fw.pg.execute_many: rows[%d] is a %s (expected a list of parameters)", i, type(rows[i])))
      end
      list[i] = dense(fw, rows[i])
    end
    if #list == 0 then
      return 0
    end
    return call("pg", conn, "execute_many", sql, list)
  end
  function api.transaction(conn, fn)
    store_check(fw, "fw.pg", conn, "postgresql")
    call("pg", conn, "begin", "BEGIN")
    local live = true
    local tx = {}
    function tx.query(_, sql, params)
      if not live then arg_error(fw, 2, "fw.pg: this transaction has ended") end
      return api.query(conn, sql, params)
    end
    function tx.execute(_, sql, params)
      if not live then arg_error(fw, 2, "fw.pg: this transaction has ended") end
      return api.execute(conn, sql, params)
    end
    function tx.execute_many(_, sql, rows)
      if not live then arg_error(fw, 2, "fw.pg: this transaction has ended") end
      return api.execute_many(conn, sql, rows)
    end
    local res = table.pack(pcall(fn, tx))
    live = false
    if not res[1] then
      call("pg", conn, "rollback", "ROLLBACK")
      error(res[2], 0)
    end
    call("pg", conn, "commit", "COMMIT")
    return table.unpack(res, 2, res.n)
  end
  return api
end

-- exactly_once: the handlers of a stream declared with it, each call one
-- transaction of the spec's fake (on_batch too: one per call, as in
-- production). ctx:send_to_dlq and batch:fail are watched (the flags are the
-- C side's) so that a call which asked for the DLQ or marked events failed
-- commits nothing. A call that raises is put back before the next one, also
-- when its Lua state was full: its retry on the rebuilt state begins afresh.
local TXN_HANDLERS = { "on_insert", "on_update", "on_replace", "on_delete", "on_change",
  "on_snapshot", "on_batch" }

-- Sets asked.dlq when obj's method `name` is called (obj: a ctx or a batch;
-- each methods table is wrapped once).
local function watch(asked, obj, name)
  local mt = debug.getmetatable(obj)
  local methods = mt and mt.__index
  local key = type(methods) == "table" and methods[name]
  if type(key) == "function" and not asked.watched[key] then
    local wrapped = function(...)
      local res = table.pack(key(...))
      asked.dlq = true
      return table.unpack(res, 1, res.n)
    end
    asked.watched[wrapped] = true
    methods[name] = wrapped
  end
end

local function transactional(raw, stream, handler, asked, connection, batch)
  return function(arg, ...)
    if batch then
      watch(asked, arg, "fail")
      local ok, ctx = pcall(arg.get, arg, 1) -- the events' ctx: their send_to_dlq
      if ok then
        watch(asked, ctx, "send_to_dlq")
      end
    else
      watch(asked, arg, "send_to_dlq")
    end
    asked.dlq = false
    raw("txn", "begin", stream, connection)
    local guard <close> = setmetatable({}, { __close = function(_, err)
      raw("txn", (err == nil and not asked.dlq) and "commit" or "abort")
    end })
    return handler(arg, ...)
  end
end

-- The MongoDB connection a stream's exactly_once runs its transactions on:
-- "default" for true, a connection declared with a mongodb:// URI for
-- { connection = name }; nil otherwise (off, or another store's).
local function txn_connection(eo, mongo)
  if eo == true then
    return "default"
  end
  if type(eo) == "table" and type(eo.connection) == "string" and mongo[eo.connection] then
    return eo.connection
  end
  return nil
end

local function wrap_exactly_once(fw, raw)
  local declare, connect = fw.stream, fw.connection
  local asked = { watched = setmetatable({}, { __mode = "k" }) }
  local mongo = { default = true } -- the MongoDB connections declared so far
  if type(connect) == "function" then
    fw.connection = function(t, ...)
      if type(t) == "table" and type(t.name) == "string" and type(t.uri) == "string"
          and t.uri:match("^mongodb") then
        mongo[t.name] = true
      end
      return connect(t, ...)
    end
  end
  fw.stream = function(t, ...)
    local connection = type(t) == "table" and txn_connection(t.exactly_once, mongo)
    if connection then
      for _, key in ipairs(TXN_HANDLERS) do
        if type(t[key]) == "function" then
          t[key] = transactional(raw, tostring(t.name), t[key], asked, connection,
            key == "on_batch")
        end
      end
    end
    return declare(t, ...)
  end
end

function M.install(c)
  local fw = require("flowwarden")
  local registry = debug.getregistry()

  require("flowwarden.env").getenv = function(name)
    return c.env[name]
  end

  local real_date = fw.date
  if real_date then
    fw.date = function(...)
      if select("#", ...) == 0 or (...) == nil then
        return real_date(c.now_ms())
      end
      return real_date(...)
    end
  end

  if not c.real_mongo then
    registry[c.make_cursor_key] = make_cursor
    fw.mongo = mongo_proxy(fw, c.bridge_call)
    wrap_exactly_once(fw, c.bridge_raw)
  end

  fw.redis = redis_proxy(fw, c.bridge_call)
  fw.pg = pg_proxy(fw, c.bridge_call)

  -- fw.http: the request fw.http prepared, answered by the spec's stubs.
  local raw = c.bridge_raw
  registry[c.http_transport_key] = function(req)
    local answer = raw("http", {
      method = req.method, url = req.url, headers = req.headers, body = req.body,
    })
    if answer.err then
      return nil, answer.err.type, answer.err.message
    end
    local r = answer.ok
    return { status = r.status, headers = r.headers or {}, body = r.body or "" }
  end
end

return M
