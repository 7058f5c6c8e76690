"""Errors the stand-in reports to clients, shaped like mongod's."""


class MongoError(Exception):
    """A command failure: becomes {ok: 0, errmsg, code, codeName, errorLabels?}."""

    def __init__(self, code, code_name, errmsg, labels=()):
        super().__init__(errmsg)
        self.code = code
        self.code_name = code_name
        self.errmsg = errmsg
        self.labels = list(labels)

    def to_reply(self):
        reply = {"ok": 0.0, "errmsg": self.errmsg, "code": self.code,
                 "codeName": self.code_name}
        if self.labels:
            reply["errorLabels"] = list(self.labels)
        return reply


def bad_value(msg):
    return MongoError(2, "BadValue", msg)


def failed_to_parse(msg):
    return MongoError(9, "FailedToParse", msg)


def type_mismatch(msg):
    return MongoError(14, "TypeMismatch", msg)
