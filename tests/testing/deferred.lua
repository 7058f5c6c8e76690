-- A stream with deferred retries (issue 29), for deferred_spec.lua: its
-- handler fails while the document's `fails` is above its attempt number.
local fw = require("flowwarden")

fw.stream { name = "deferred", database = "shop", collection = "orders", dlq = true,
  retry = { mode = "deferred", max_attempts = 5, initial_delay = "30s", multiplier = 4,
            max_delay = "2h", jitter = false },
  on_insert = function(ctx)
    if ctx:attempt_number() <= (ctx:full_document().fails or 0) then
      error(fw.error("Http.Timeout", "hook timed out"))
    end
  end }
