-- Runs every case of mongo_cases.lua through fw.mongo (against the server of
-- the run URI) and through the test fake, in one handler call, and reports
-- both outcomes per case for tests/integration/test_mongo_fake.py to compare.
-- FW_CASES_DB names the database (each case gets a fresh collection in it).
local fw = require("flowwarden")
local cjson = require("cjson")
local cases = require("mongo_cases")
local mongo_fake = require("flowwarden.testing.mongo_fake")

local DB = fw.env("FW_CASES_DB")

local function report(t)
  fw.log.info("REPORT " .. cjson.encode(t))
end

fw.stream {
  name = "cases", database = DB, collection = "trigger", timeout = "120s",
  on_insert = function()
    local fake = mongo_fake.new { fw = fw }
    local list = cases.cases(fw)
    for i, case in ipairs(list) do
      local name = "case_" .. i
      report({
        i = i, name = case.name,
        real = cases.run(case, fw.mongo.collection(DB, name)),
        fake = cases.run(case, fake:collection(DB, name)),
      })
    end
    report({ done = #list })
  end,
}
