--[[
flowwarden.testing.replay_cli: `flowwarden replay SCRIPT --events FILE
[--stream NAME] [--json] [--uri URI]` (src/cli/test_cli.c runs main). The
recorded events go through the script offline, as in a spec: fakes for
fw.mongo (or the server of --uri) and fw.http, a virtual clock. One line per
event, then a summary; exit 3 when an event ended in dlq or lost.
]]

local fwt = require("flowwarden.testing")
local fw = require("flowwarden")

local M = {}

local USAGE = "usage: flowwarden replay SCRIPT --events FILE [--stream NAME] [--json] [--uri URI]"

-- An error raised inside flowwarden.testing, without the position of the
-- library's own line (the user can do nothing with it).
local function message(err)
  return (tostring(err):gsub("^%[flowwarden%][^:]*:%d+: ", ""))
end

local function usage(msg)
  io.stderr:write("flowwarden: replay: ", msg, "\n", USAGE, "\n")
  return 2
end

local function parse(args)
  local o = {}
  local i = 1
  while i <= #args do
    local a = args[i]
    if a == "--events" or a == "--stream" or a == "--uri" then
      if not args[i + 1] then
        return nil, "option " .. a .. " needs a value"
      end
      o[a:sub(3)] = args[i + 1]
      i = i + 2
    elseif a == "--json" then
      o.json = true
      i = i + 1
    elseif a == "--help" or a == "-h" then
      o.help = true
      i = i + 1
    elseif a:sub(1, 1) == "-" then
      return nil, "unknown option " .. a
    elseif o.script then
      return nil, string.format('unexpected argument "%s"', a)
    else
      o.script = a
      i = i + 1
    end
  end
  return o
end

-- The stream an event goes to: --stream, the only stream, or the one
-- watching the event's namespace.
local function stream_for(app, opts, ev)
  if opts.stream then
    return opts.stream
  end
  if #app.streams == 1 then
    return app.streams[1].name
  end
  local found
  local ns = ev.ns or {}
  for _, s in ipairs(app.streams) do
    if s.database == ns.db and (s.collection == nil or s.collection == ns.coll) then
      if found then
        return nil, string.format("several streams watch %s.%s (%s, %s): use --stream",
          tostring(ns.db), tostring(ns.coll), found, s.name)
      end
      found = s.name
    end
  end
  if not found then
    return nil, string.format("no stream watches %s.%s: use --stream", tostring(ns.db),
      tostring(ns.coll))
  end
  return found
end

function M.main(args)
  local opts, err = parse(args)
  if not opts then
    return usage(err)
  end
  if opts.help then
    print(USAGE)
    return 0
  end
  if not opts.script then
    return usage("missing SCRIPT")
  end
  if not opts.events then
    return usage("missing --events FILE")
  end
  local ok, app = pcall(fwt.load, opts.script, { uri = opts.uri, mongo = opts.uri })
  if not ok then
    io.stderr:write(tostring(app), "\n")
    return 1
  end
  if opts.stream then
    local known = false
    for _, s in ipairs(app.streams) do
      known = known or s.name == opts.stream
    end
    if not known then
      io.stderr:write(string.format('flowwarden: replay: unknown stream "%s" in %s\n', opts.stream,
        opts.script))
      return 1
    end
  end
  local events
  ok, events = pcall(fwt.events_from, opts.events)
  if not ok then
    io.stderr:write("flowwarden: replay: ", message(events), "\n")
    return 1
  end
  local counts, order, failed = {}, {}, false
  for n, ev in ipairs(events) do
    local stream, why = stream_for(app, opts, ev)
    if not stream then
      io.stderr:write(string.format("flowwarden: replay: %s:%d: %s\n", opts.events, n, why))
      return 1
    end
    local delivered, r = pcall(app.deliver, app, stream, ev)
    if not delivered then
      io.stderr:write(string.format("flowwarden: replay: %s: event %d: %s\n", opts.events, n, message(r)))
      return 1
    end
    local e = r.errors[#r.errors]
    if opts.json then
      print(fw.json.encode({ n = n, stream = stream, event_id = r.event_id, outcome = r.outcome,
        attempts = r.attempts, error_type = e and e.type or fw.null,
        error_message = e and e.message or fw.null }))
    else
      print(string.format("%d %s %s: %s after %d attempt(s)%s", n, stream, r.event_id, r.outcome,
        r.attempts, e and (": " .. e.type .. ": " .. e.message) or ""))
    end
    if not counts[stream] then
      counts[stream] = {}
      order[#order + 1] = stream
    end
    counts[stream][r.outcome] = (counts[stream][r.outcome] or 0) + 1
    failed = failed or r.outcome == "dlq" or r.outcome == "lost"
  end
  if opts.json then
    local summary = {}
    for _, s in ipairs(order) do
      summary[s] = counts[s]
    end
    print(fw.json.encode({ summary = summary, events = #events }))
  else
    print(string.format("%-24s %8s %8s %8s %8s %8s %10s", "stream", "handled", "skipped", "dlq",
      "lost", "parked", "no_handler"))
    for _, s in ipairs(order) do
      local c = counts[s]
      print(string.format("%-24s %8d %8d %8d %8d %8d %10d", s, c.handled or 0, c.skipped or 0,
        c.dlq or 0, c.lost or 0, c.parked or 0, c.no_handler or 0))
    end
  end
  return failed and 3 or 0
end

return M
