-- Posts paid orders to another service in batches (issue 30): one HTTP POST
-- of a JSON array per batch of up to 200 change events, instead of one per
-- event.
--
--   HOOK_URL=https://hooks.example/orders/batch HOOK_TOKEN=... \
--     flowwarden run examples/webhook_batch.lua --uri "mongodb://127.0.0.1:27017/shop?replicaSet=rs0"
--
-- The service answers 200 when it took the whole array. A 5xx, 429, a
-- timeout or a refused connection fails the whole batch: it is retried with
-- backoff, then bisected, and whatever still fails alone goes to the
-- dead-letter queue. The service may also answer 207 with the positions
-- (1-based) it refused: { "rejected": [ { "index": 3, "reason": "..." } ] };
-- only those events are marked failed (batch:fail) and retried. Each item
-- carries its event id, so the service can drop a repeat.
local fw = require("flowwarden")

local HOOK_URL = fw.env("HOOK_URL")
local HOOK_TOKEN = fw.env("HOOK_TOKEN")

fw.defaults {
  http = { allow_hosts = { HOOK_URL:match("^https?://%[?([^/:%]]+)") } },
}

fw.stream {
  name = "paid-orders-batch",
  collection = "orders",
  operation_types = { "update" },
  full_document = "updateLookup",
  timeout = "10s",                                   -- one call: one POST of a whole batch
  retry = { max_attempts = 4, initial_delay = "500ms" },
  dlq = { collection = "webhook_dlq" },
  batch = { max_events = 200, max_wait = "50ms" },

  on_batch = function(batch)
    local items, event_of = {}, {}
    for i, ctx in batch:events() do
      local changed = ctx:update_description().updatedFields
      local order = ctx:full_document()
      if changed.status == "PAID" and order ~= nil then
        items[#items + 1] = { event = ctx:event_id(), order = order._id, total = order.total }
        event_of[#items] = i
      end
    end
    if #items == 0 then
      return
    end
    local res = fw.http.post(HOOK_URL, {
      body = fw.json.encode(items, { mode = "plain" }),
      headers = { Authorization = "Bearer " .. HOOK_TOKEN,
                  ["Content-Type"] = "application/json" },
      timeout = "5s",
      raise_for_status = true,                       -- the whole batch failed
    })
    if res.status == 207 then
      for _, r in ipairs(fw.json.decode(res.body).rejected or {}) do
        batch:fail(event_of[r.index], fw.error("Hook.Rejected", tostring(r.reason)))
      end
    end
  end,
}
