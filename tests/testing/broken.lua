local fw = require("flowwarden")
fw.stream { name = "s", database = "shop", collection = "orders", on_insrt = function() end }
