-- Notifies another service of every paid order with an HTTP POST.
--
--   HOOK_URL=https://hooks.example/orders HOOK_TOKEN=... \
--     flowwarden run examples/webhook.lua --uri "mongodb://127.0.0.1:27017/shop?replicaSet=rs0"
--
-- A 5xx or 429 answer (Http.Status.Transient), a timeout or a refused
-- connection is retried with backoff; a 4xx answer (Http.Status.Permanent)
-- cannot succeed on a retry and goes straight to the dead-letter queue.
local fw = require("flowwarden")

local HOOK_URL = fw.env("HOOK_URL")
local HOOK_TOKEN = fw.env("HOOK_TOKEN")

fw.defaults {
  -- URLs and hosts are checked against this list before any connection.
  http = { allow_hosts = { HOOK_URL:match("^https?://%[?([^/:%]]+)") } },
}

fw.stream {
  name = "paid-orders-webhook",
  collection = "orders",
  operation_types = { "update" },
  full_document = "updateLookup",
  timeout = "5s",
  retry = { max_attempts = 4, initial_delay = "500ms" },
  dlq = { collection = "webhook_dlq" },

  on_update = function(ctx)
    local changed = ctx:update_description().updatedFields
    local order = ctx:full_document()
    if changed.status ~= "PAID" or order == nil then
      return
    end
    -- Plain JSON for a service that knows nothing of MongoDB: an ObjectId
    -- _id is sent as "64f1...", not {"$oid": "64f1..."}; a Decimal128 total
    -- as "19.99", a date as "2024-05-01T12:00:00.000Z" (`json = {...}`
    -- would send Extended JSON, the default).
    local body = fw.json.encode({ event = ctx:event_id(), order = order._id, total = order.total },
      { mode = "plain" })
    local res = fw.http.post(HOOK_URL, {
      body = body,
      headers = {
        Authorization = "Bearer " .. HOOK_TOKEN,
        ["Content-Type"] = "application/json",
        ["Idempotency-Key"] = ctx:event_id(),
      },
      timeout = "2s",
      raise_for_status = true,
    })
    fw.log.info("order", tostring(order._id), "notified:", res.status)
  end,
}
