"""Specification tests expected not to pass against the stand-in, each group with its reason.

spec_unified.py does not run these (unless --all, which shows what they still do). Tests the
runner skips by themselves (topology other than a replica set, a server version other than
7.0, or an argument/entity pymongo 3.11 or the runner lacks) are not listed here: the runner
prints the reason with -v. docs/compatibility.md keeps the same list for users.

Each entry: (group, file name pattern (fnmatch), description substring or None, reason).
"""

import fnmatch

PYMONGO = "client: pymongo 3.11 (Debian's) "
NOT_CLAIMED = "stand-in: not played (flowwarden does not use it): "

EXPECTED = [
    # --- change streams ---------------------------------------------------------------
    ("change-streams", "change-streams.json", "comment is set on getMore",
     PYMONGO + "sends no comment on getMore (the spec's 4.4+ behaviour came with pymongo 4)"),
    # --- CRUD ---------------------------------------------------------------------------
    ("crud", "aggregate.json", "sets comment on getMore",
     PYMONGO + "sends no comment on getMore"),
    ("crud", "find-comment.json", "sets comment on getMore",
     PYMONGO + "sends no comment on getMore"),
    ("crud", "find.json", "Find with batchSize equal to limit",
     PYMONGO + "sends batchSize 4 for limit 5 and batchSize 5 (a later spec change)"),
    ("crud", "*-collation.json", None, NOT_CLAIMED + "collation (only {locale: 'simple'})"),
    ("crud", "aggregate-merge*.json", None, NOT_CLAIMED + "$merge"),
    ("crud", "aggregate-out*.json", None, NOT_CLAIMED + "$out"),
    ("crud", "*aggregate-write-readPreference.json", None, NOT_CLAIMED + "$out/$merge"),
    ("crud", "*-arrayFilters.json", None, NOT_CLAIMED + "arrayFilters"),
    ("crud", "*-hint-unacknowledged.json", None,
     PYMONGO + "refuses hint with w: 0 before sending (ConfigurationError)"),
    ("crud", "*insert*-dots_and_dollars.json", None,
     PYMONGO + "refuses keys with '.' or a leading '$' before sending (InvalidDocument)"),
    ("crud", "*update*-dots_and_dollars.json", None, NOT_CLAIMED + "$setField, $literal keys"),
    ("crud", "findOneAndUpdate-dots_and_dollars.json", None,
     NOT_CLAIMED + "$setField, $literal keys"),
    ("crud", "bypassDocumentValidation.json", None,
     PYMONGO + "omits bypassDocumentValidation: false; " + NOT_CLAIMED + "validators"),
    ("crud", "db-aggregate.json", "$listLocalSessions", NOT_CLAIMED + "$listLocalSessions"),
    ("crud", "estimatedDocumentCount.json", "on views", NOT_CLAIMED + "views"),
    ("crud", "findOneAndUpdate-errorResponse.json", "document validation errInfo",
     NOT_CLAIMED + "validators"),
    # --- retryable reads ----------------------------------------------------------------
    ("retryable-reads", "readConcernMajorityNotAvailableYet.json", None,
     PYMONGO + "does not retry ReadConcernMajorityNotAvailableYet (134)"),
    # --- retryable writes ---------------------------------------------------------------
    ("retryable-writes", "aggregate-out-merge.json", None, NOT_CLAIMED + "$out/$merge"),
    ("retryable-writes", "*.json", "succeeds after WriteConcernError",
     PYMONGO + "reads the RetryableWriteError label inside writeConcernError; mongod (and the "
     "stand-in) put it at the reply's top level (error_labels.cpp), so pymongo 3.11 does not "
     "retry"),
    ("retryable-writes", "*.json", "succeeds after retryable writeConcernError",
     PYMONGO + "reads the RetryableWriteError label inside writeConcernError (see above)"),
    ("retryable-writes", "*.json", "fails after multiple retryable writeConcernErrors",
     PYMONGO + "reads the RetryableWriteError label inside writeConcernError (see above)"),
]


def reason(group, filename, description):
    """The reason a test is expected not to pass, or None."""
    for g, pattern, substring, why in EXPECTED:
        if g == group and fnmatch.fnmatch(filename, pattern) and (
                substring is None or substring in description):
            return why
    return None
