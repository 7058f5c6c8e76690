-- Issue 31: key partitions of a stream (fw.stream { partitions = N }).
--
-- A stream with partitions = N (1..256) runs as N units, "<name>#k/N" for k = 0 .. N-1
-- (0-based, as $mod counts). Each unit is a stream of its own for the runtime (its own
-- change stream, checkpoint, Lua state and dispatcher); its change stream carries, before the
-- script's own stages, a server-side $match keeping the events whose key hashes to k:
--
--   { $match = { $expr = { $eq = { { $abs = { $mod = { { $toHashedIndexKey =
--       "$documentKey._id" }, N } } }, k } } } }
--
-- $toHashedIndexKey is the hash of a hashed index (MongoDB 7.0+): a key always lands in the same
-- unit, so its events stay in order. An event without a documentKey (drop, rename,
-- dropDatabase, invalidate) hashes as null (missing is hashed as null): it goes to one unit, the
-- same one every time. With N = 1 the unit takes every event and no $match is added.

local M = {}

M.MAX = 256

-- The unit name of partition k of N of stream `name`.
function M.unit_name(name, k, n)
  return string.format("%s#%d/%d", name, k, n)
end

-- Whether a declared name looks like a unit name (reserved: ctx:partition() reads it back).
function M.is_unit_name(name)
  return name:find("#%d+/%d+$") ~= nil
end

-- Reads t.partitions into spec.partitions (nil: not partitioned); errors go to ctx.
function M.read(ctx, t, spec, repr)
  if t.partitions == nil then
    return
  end
  local v = t.partitions
  local i = math.type(v) == "integer" and v or (math.type(v) == "float" and math.tointeger(v))
  if not i or i < 1 or i > M.MAX then
    ctx:fail("partitions", "expected an integer from 1 to %d (units of the stream, each with "
      .. "its own change stream and checkpoint, keys split by hash), got %s", M.MAX, repr(v))
    return
  end
  spec.partitions = i
end

local function match_stage(k, n)
  return { ["$match"] = { ["$expr"] = { ["$eq"] = {
    { ["$abs"] = { ["$mod"] = { { ["$toHashedIndexKey"] = "$documentKey._id" }, n } } }, k } } } }
end

local function unit(spec, k, n)
  local u = {}
  for key, value in pairs(spec) do
    u[key] = value
  end
  u.name = M.unit_name(spec.name, k, n)
  u.stream = spec.name
  u.partition = k
  u.declared_pipeline = spec.pipeline
  if n > 1 then
    local pipeline = { match_stage(k, n) }
    for _, stage in ipairs(spec.pipeline) do
      pipeline[#pipeline + 1] = stage
    end
    u.pipeline = pipeline
  end
  return u
end

-- The script's streams with each partitioned one replaced by its units, in order.
function M.expand(streams)
  local out = {}
  for _, spec in ipairs(streams) do
    for k = 0, (spec.partitions or 0) - 1 do
      out[#out + 1] = unit(spec, k, spec.partitions)
    end
    if not spec.partitions then
      out[#out + 1] = spec
    end
  end
  return out
end

return M
