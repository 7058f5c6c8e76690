-- A stream whose enqueue policy writes down what its err held (issue 25:
-- the same fields as on_error's err), for enqueue_policy_spec.lua.
local fw = require("flowwarden")
fw.stream {
  name = "pay",
  database = "shop",
  collection = "payments",
  dlq = {
    enqueue_policy = function(letter, err)
      local fields = 0
      for _ in pairs(err.fields) do
        fields = fields + 1
      end
      return fw.dlq.requeue { diagnostics = {
        type = err.type, message = err.message, code = err.fields.code, fields = fields,
        where = err.where or "none",
        traceback = err.traceback:find("stack traceback", 1, true) ~= nil,
      } }
    end,
  },
  on_insert = function(ctx)
    if ctx:full_document().send then
      ctx:send_to_dlq("sent by hand")
      return
    end
    error(fw.error("Pay.Declined", "card refused", { code = 42 }))
  end,
}
