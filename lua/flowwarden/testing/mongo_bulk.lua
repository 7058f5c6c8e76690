--[[
flowwarden.testing.mongo_bulk: the test fake's coll:bulk_write(ops [, { ordered }])
(issue 30), as fw.mongo's: ops is a list of { insert_one = doc }, { update_one =
{ filter, update, upsert } }, update_many, { replace_one = { filter, replacement,
upsert } }, { delete_one = { filter } } and delete_many. Every operation is
checked before any runs (argument errors name ops[i]); a write the server
would refuse becomes a write error whose index numbers the operation from 1;
ordered = false goes on after one. The result counts what was done.

install(methods, h) adds methods.bulk_write, with the fake's helpers in h.
]]

local A = require("flowwarden.testing.mongo_args")
local V = require("flowwarden.testing.mongo_values")

local M = {}

local KINDS = {
  insert_one = {}, update_one = { "filter", "update", "upsert" },
  update_many = { "filter", "update", "upsert" },
  replace_one = { "filter", "replacement", "upsert" },
  delete_one = { "filter" }, delete_many = { "filter" },
}
local NAMES = { "insert_one", "update_one", "update_many", "replace_one", "delete_one",
  "delete_many" }

-- ops[i] checked into { kind, doc | filter, update, upsert }.
local function read_op(self, op, o, i)
  local where = string.format("ops[%d]", i)
  if type(o) ~= "table" then
    A.arg_error(op, "bulk_write: %s must be a table such as { insert_one = doc }, got %s", where,
      type(o))
  end
  local kind, body = next(o)
  if type(kind) ~= "string" then
    A.arg_error(op, "bulk_write: %s must have one key naming the operation, such as insert_one",
      where)
  end
  if not KINDS[kind] then
    A.arg_error(op, 'bulk_write: %s: unknown operation "%s" (the operations are %s)', where, kind,
      table.concat(NAMES, ", "))
  end
  if next(o, kind) ~= nil then
    A.arg_error(op, "bulk_write: %s must have exactly one key naming the operation", where)
  end
  local path = where .. "." .. kind
  if kind == "insert_one" then
    local doc = A.arg_document(self, op, body, path)
    A.check_document(self, op, body, path)
    return { kind = kind, doc = doc }
  end
  A.check_opts(op, body, KINDS[kind])
  local s = { kind = kind, filter = A.arg_document(self, op, A.opt(body, "filter"),
    path .. ".filter") }
  if kind == "replace_one" then
    s.update = A.arg_replacement(self, op, A.opt(body, "replacement"), path .. ".replacement")
  elseif kind ~= "delete_one" and kind ~= "delete_many" then
    s.update = A.arg_update(self, op, A.opt(body, "update"), path .. ".update")
  end
  s.upsert = kind:sub(1, 6) ~= "delete" and A.opt_bool(op, body, "upsert", false)
  return s
end

-- Runs step s (operation i) into res.
local function run_op(self, op, h, s, i, res)
  if s.kind == "insert_one" then
    h.with_id(self, s.doc)
    h.insert_doc(op, s.doc)
    res.inserted = res.inserted + 1
  elseif s.kind == "delete_one" or s.kind == "delete_many" then
    local stored = h.docs_of(op, false)
    for _, d in ipairs(h.matching(op, s.filter, s.kind == "delete_one" and 1 or nil)) do
      table.remove(stored, h.find_index(stored, d))
      res.deleted = res.deleted + 1
    end
  else
    local matched, modified, upserted = h.apply_update(self, op, s.filter, s.update,
      s.kind == "replace_one", s.kind == "update_many", s.upsert)
    res.matched, res.modified = res.matched + matched, res.modified + modified
    if upserted ~= nil then
      res.upserted = res.upserted + 1
      res.upserted_ids[i] = self.export(V.copy(upserted))
    end
  end
end

function M.install(methods, h)
  function methods.bulk_write(hd, ops, opts)
    local self, op = h.begin("bulk_write", hd, 2)
    A.check_opts(op, opts, { "ordered" })
    local ordered = A.opt_bool(op, opts, "ordered", true)
    if type(ops) ~= "table" or #ops == 0 then
      A.arg_error(op, "bulk_write: ops must be a non-empty array, got %s",
        type(ops) == "table" and "an empty or non-array table" or type(ops))
    end
    local steps = {}
    for i, o in ipairs(ops) do
      steps[i] = read_op(self, op, o, i)
    end
    op.write = true
    local res = { inserted = 0, matched = 0, modified = 0, deleted = 0, upserted = 0,
      upserted_ids = {} }
    local errs = {}
    for i, s in ipairs(steps) do
      op.index = i
      local ok, e = pcall(run_op, self, op, h, s, i, res)
      if not ok then
        if type(e) ~= "table" or not (e.fields and e.fields.write_errors) then
          error(e, 0)
        end
        errs[#errs + 1] = e
        if ordered then
          break
        end
      end
    end
    if #errs > 0 then
      h.raise_write_errors(op, errs, { inserted = res.inserted, matched = res.matched,
        modified = res.modified, deleted = res.deleted, upserted = res.upserted })
    end
    return res
  end
end

return M
