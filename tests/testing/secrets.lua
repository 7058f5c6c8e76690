-- secrets_spec.lua's script: a handler whose errors and logs quote fw.env values.
local fw = require("flowwarden")
local token = fw.env("HOOK_TOKEN")
local region = fw.env("REGION", { secret = false })

fw.stream {
  name = "s", database = "shop", collection = "orders", dlq = true, retry = { max_attempts = 1 },
  on_insert = function(ctx)
    fw.log.info("calling with", token, "in", region)
    if ctx:full_document().send then
      return ctx:send_to_dlq("sent aside, token " .. token)
    end
    if ctx:full_document().typed then
      error(fw.error("Auth.Failed", "refused " .. token .. " in " .. region))
    end
    error("cannot reach https://svc/?token=" .. token)
  end,
}
