-- Streams whose web hook may be down (issue 29: circuit breaker, rate limit), for
-- circuit_spec.lua.
local fw = require("flowwarden")

local HOOK = "https://hooks.example/orders"

local function post(ctx)
  fw.http.post(HOOK, { json = { id = ctx:full_document()._id }, raise_for_status = true })
end

fw.stream { name = "held", database = "shop", collection = "orders", on_insert = post,
  retry = { max_attempts = 2, initial_delay = "1s", jitter = false }, dlq = true,
  circuit = { on = { "Http.Status.Transient" }, open_for = "5s", max_open_for = "20s" } }

fw.stream { name = "gives_up", database = "shop", collection = "orders2", on_insert = post,
  retry = { max_attempts = 2, initial_delay = "1s", jitter = false }, dlq = true,
  circuit = { on = { "Http.Status.Transient" }, open_for = "5s", give_up_after = "1m" } }

fw.stream { name = "forever", database = "shop", collection = "orders3", on_insert = post,
  retry = { max_attempts = 2, initial_delay = "1s", jitter = false }, dlq = true,
  circuit = { on = { "Http.Status.Transient" }, open_for = "5s", max_open_for = "1h" } }

fw.stream { name = "limited", database = "shop", collection = "orders4", on_insert = post,
  rate_limit = "2/s" }

-- on_batch: one token per call, whatever the batch's size.
fw.stream { name = "limited_batch", database = "shop", collection = "orders5",
  rate_limit = "2/s", batch = { max_events = 10 },
  on_batch = function(batch) for _, ctx in batch:events() do post(ctx) end end }
