--[[
flowwarden.testing.pg_fake: a PostgreSQL recorder for handler specs
(app.pg). It runs no SQL: it records every statement with its parameters and
answers with what the spec scripted.

  local pg = pg_fake.new()
  pg:stub(sql, answer [, { times = n }])
      sql: a plain substring of the statement ("INSERT INTO orders"), or a Lua
           pattern when it starts with "^"
      answer: { rows = { {col = v, ...}, ... } } for query,
              { affected = n } for execute,
              { err = "Pg.UniqueViolation", sqlstate = "23505", message = ... },
              or function(sql, params) returning one of those
      The most recent matching stub answers; without one, query returns no
      rows and execute 0.
  pg.statements   { { conn, kind = "query" | "execute" | "begin" | "commit" |
                      "rollback", sql, params }, ... } in order; fw.pg.execute_many
                  records one { kind = "execute_many", sql, rows = { params, ... } }
                  and asks the stubs once per row (the first error fails the
                  whole call, with fields.row; the affected counts add up)
  pg:run(conn, kind, sql, params) -> rows | affected, or nil, err (the bridge)
]]

local M = {}

local Fake = {}
Fake.__index = Fake

local SQLSTATES = { ["Pg.UniqueViolation"] = "23505", ["Pg.ForeignKey"] = "23503",
  ["Pg.Syntax"] = "42601", ["Pg.Permission"] = "42501", ["Pg.Serialization"] = "40001",
  ["Pg.Deadlock"] = "40P01", ["Pg.Timeout"] = "57014" }

function M.new()
  return setmetatable({ statements = {}, stubs = {} }, Fake)
end

function Fake:stub(sql, answer, opts)
  if type(sql) ~= "string" then
    error("app.pg:stub: sql must be a string (a substring, or a Lua pattern starting with ^), got "
      .. type(sql), 2)
  end
  if type(answer) ~= "table" and type(answer) ~= "function" then
    error("app.pg:stub: answer must be a table { rows = ... } | { affected = n } | { err = type } "
      .. "or a function(sql, params), got " .. type(answer), 2)
  end
  opts = opts or {}
  table.insert(self.stubs, 1, { sql = sql, answer = answer, left = opts.times })
  return self
end

local function matches(stub, sql)
  if stub.sql:sub(1, 1) == "^" then
    return sql:find(stub.sql) ~= nil
  end
  return sql:find(stub.sql, 1, true) ~= nil
end

function Fake:_answer(sql, params)
  for i, s in ipairs(self.stubs) do
    if matches(s, sql) then
      if s.left then
        s.left = s.left - 1
        if s.left <= 0 then table.remove(self.stubs, i) end
      end
      if type(s.answer) == "function" then
        return s.answer(sql, params) or {}
      end
      return s.answer
    end
  end
  return {}
end

local function failure(conn, a)
  local state = a.sqlstate or SQLSTATES[a.err] or ""
  return { type = a.err, message = a.message or ("injected " .. a.err),
           fields = { sqlstate = state, connection = conn } }
end

-- execute_many: every row answered as an execute; all or nothing.
function Fake:_run_many(conn, sql, rows)
  self.statements[#self.statements + 1] = { conn = conn, kind = "execute_many", sql = sql,
    rows = rows }
  local total = 0
  for i, params in ipairs(rows) do
    local a = self:_answer(sql, params)
    if a.err then
      local err = failure(conn, a)
      err.fields.row = i
      return nil, err
    end
    total = total + (a.affected or 0)
  end
  return total
end

function Fake:run(conn, kind, sql, params)
  if kind == "execute_many" then
    return self:_run_many(conn, sql, params)
  end
  self.statements[#self.statements + 1] = { conn = conn, kind = kind, sql = sql,
    params = params or {} }
  if kind == "begin" or kind == "commit" or kind == "rollback" then
    return 0
  end
  local a = self:_answer(sql, params or {})
  if a.err then
    return nil, failure(conn, a)
  end
  if kind == "query" then
    return a.rows or {}
  end
  return a.affected or 0
end

return M
