--[[
flowwarden.testing.mongo_codes: the server error codes fw.mongo types other
than Mongo.Command, with their names: the table of src/lua_api/mongo_errors.c
(and docs/lua-api.md), which this copy must follow.
]]

local M = {}

local CODES = {
  [11000] = { name = "DuplicateKey", type = "Mongo.DuplicateKey" },
  [11001] = { name = "DuplicateKey", type = "Mongo.DuplicateKey" },
  [50] = { name = "MaxTimeMSExpired", type = "Mongo.Timeout" },
  [202] = { name = "NetworkInterfaceExceededTimeLimit", type = "Mongo.Timeout" },
  [262] = { name = "ExceededTimeLimit", type = "Mongo.Timeout" },
  [407] = { name = "PooledConnectionAcquisitionExceededTimeLimit", type = "Mongo.Timeout" },
  [290] = { name = "TransactionExceededLifetimeLimitSeconds", type = "Mongo.TransactionTooLong" },
  [257] = { name = "TransactionTooLarge", type = "Mongo.TransactionTooLarge" },
  [388] = { name = "TransactionTooLargeForCache", type = "Mongo.TransactionTooLarge" },
  [6] = { name = "HostUnreachable", type = "Mongo.Network" },
  [7] = { name = "HostNotFound", type = "Mongo.Network" },
  [89] = { name = "NetworkTimeout", type = "Mongo.Network" },
  [9001] = { name = "SocketException", type = "Mongo.Network" },
  [133] = { name = "FailedToSatisfyReadPreference", type = "Mongo.NotWritablePrimary" },
  [134] = { name = "ReadConcernMajorityNotAvailableYet", type = "Mongo.NotWritablePrimary" },
  [150] = { name = "StaleEpoch", type = "Mongo.NotWritablePrimary" },
  [13388] = { name = "StaleConfig", type = "Mongo.NotWritablePrimary" },
  [91] = { name = "ShutdownInProgress", type = "Mongo.NotWritablePrimary" },
  [189] = { name = "PrimarySteppedDown", type = "Mongo.NotWritablePrimary" },
  [10058] = { name = "LegacyNotPrimary", type = "Mongo.NotWritablePrimary" },
  [10107] = { name = "NotWritablePrimary", type = "Mongo.NotWritablePrimary" },
  [11600] = { name = "InterruptedAtShutdown", type = "Mongo.NotWritablePrimary" },
  [11602] = { name = "InterruptedDueToReplStateChange", type = "Mongo.NotWritablePrimary" },
  [13435] = { name = "NotPrimaryNoSecondaryOk", type = "Mongo.NotWritablePrimary" },
  [13436] = { name = "NotPrimaryOrSecondary", type = "Mongo.NotWritablePrimary" },
  [64] = { name = "WriteConcernFailed", type = "Mongo.WriteConcern" },
  [79] = { name = "UnknownReplWriteConcern", type = "Mongo.WriteConcern" },
  [100] = { name = "UnsatisfiableWriteConcern", type = "Mongo.WriteConcern" },
  [2] = { name = "BadValue", type = "Mongo.Invalid" },
  [4] = { name = "NoSuchKey", type = "Mongo.Invalid" },
  [9] = { name = "FailedToParse", type = "Mongo.Invalid" },
  [13] = { name = "Unauthorized", type = "Mongo.Invalid" },
  [14] = { name = "TypeMismatch", type = "Mongo.Invalid" },
  [15] = { name = "Overflow", type = "Mongo.Invalid" },
  [18] = { name = "AuthenticationFailed", type = "Mongo.Invalid" },
  [20] = { name = "IllegalOperation", type = "Mongo.Invalid" },
  [22] = { name = "InvalidBSON", type = "Mongo.Invalid" },
  [28] = { name = "PathNotViable", type = "Mongo.Invalid" },
  [29] = { name = "NonExistentPath", type = "Mongo.Invalid" },
  [30] = { name = "InvalidPath", type = "Mongo.Invalid" },
  [40] = { name = "ConflictingUpdateOperators", type = "Mongo.Invalid" },
  [52] = { name = "DollarPrefixedFieldName", type = "Mongo.Invalid" },
  [53] = { name = "InvalidIdField", type = "Mongo.Invalid" },
  [54] = { name = "NotSingleValueField", type = "Mongo.Invalid" },
  [55] = { name = "InvalidDBRef", type = "Mongo.Invalid" },
  [56] = { name = "EmptyFieldName", type = "Mongo.Invalid" },
  [57] = { name = "DottedFieldName", type = "Mongo.Invalid" },
  [59] = { name = "CommandNotFound", type = "Mongo.Invalid" },
  [66] = { name = "ImmutableField", type = "Mongo.Invalid" },
  [72] = { name = "InvalidOptions", type = "Mongo.Invalid" },
  [73] = { name = "InvalidNamespace", type = "Mongo.Invalid" },
  [115] = { name = "CommandNotSupported", type = "Mongo.Invalid" },
  [121] = { name = "DocumentValidationFailure", type = "Mongo.Invalid" },
  [166] = { name = "CommandNotSupportedOnView", type = "Mongo.Invalid" },
  [168] = { name = "InvalidPipelineOperator", type = "Mongo.Invalid" },
  [10334] = { name = "BSONObjectTooLarge", type = "Mongo.Invalid" },
  [17419] = { name = "Location17419", type = "Mongo.Invalid" },
  [40414] = { name = "Location40414", type = "Mongo.Invalid" },
  [40415] = { name = "Location40415", type = "Mongo.Invalid" },
  [51024] = { name = "Location51024", type = "Mongo.Invalid" },
}

-- { name = "DuplicateKey", type = "Mongo.DuplicateKey" } for code, or nil
-- (a Mongo.Command error without a name).
function M.lookup(code)
  return CODES[code]
end

return M
