-- A script for mongo_check_spec.lua: each inserted document names a write
-- whose document fw.mongo refuses before sending it.
local fw = require("flowwarden")

local cases = {}

function cases.bad_string(c)
  c:update_one({ _id = 1 }, { ["$set"] = { l = { "ok", { s = "a\xffb" } } } })
end

function cases.empty_key(c)
  c:insert_many({ { _id = 1 }, { a = { [""] = 1 } } })
end

function cases.bad_key(c)
  c:bulk_write({ { insert_one = { _id = 2 } }, { replace_one = { filter = { _id = 1 },
    replacement = { ["k\xc3"] = 1 } } } })
end

function cases.fine(c)
  c:insert_one({ _id = 3, s = "caf\xc3\xa9 a\0b" })
end

fw.stream {
  name = "s", database = "shop", collection = "c",
  retry = { max_attempts = 1 },
  dlq = true,
  on_insert = function(ctx)
    local doc = ctx:full_document()
    cases[doc.case](fw.mongo.collection("shop", "out"))
  end,
}
