"""Authentication (`--auth USER:PASSWORD`): SCRAM-SHA-256 and SCRAM-SHA-1 as mongod does them.

One user, in the `admin` database, with both SCRAM credentials (what `createUser` makes on 4.0+)
and every privilege. What a driver sees follows mongod 6.0 and the drivers' auth and handshake
specifications:

- hello/isMaster with `saslSupportedMechs: "admin.<user>"` answers
  `saslSupportedMechs: ["SCRAM-SHA-1", "SCRAM-SHA-256"]` (absent for an unknown user);
  `speculativeAuthenticate: {saslStart: 1, mechanism, payload, db, options}` answers
  `speculativeAuthenticate: {conversationId: 1, done: false, payload}`, or nothing when that
  first step fails (the driver then authenticates the ordinary way).
- saslStart / saslContinue carry the RFC 5802 / RFC 7677 messages in `payload` (BinData, or a
  base64 string answered as one); `conversationId` is always 1; `options.skipEmptyExchange`
  ends the conversation with the server signature, otherwise one empty round trip follows.
  SCRAM-SHA-1 derives its key from HEX(MD5(user + ":mongo:" + password)), SCRAM-SHA-256 from
  the SASLprep'd password; iteration counts are mongod's defaults (10,000 and 15,000).
- Any failed step (unknown user, wrong proof, malformed message) answers 18
  AuthenticationFailed "Authentication failed." and resets the conversation; an unknown
  mechanism answers 334 MechanismUnavailable; a wrong conversationId 17 ProtocolError.
- Until a connection has authenticated, every command but the handshake, the SASL commands,
  ping and buildInfo answers 13 Unauthorized "command <name> requires authentication".
"""

import base64
import hashlib
import hmac
import os

from bson.binary import Binary

from .errors import MongoError

AUTH_DB = "admin"
MECHANISMS = ("SCRAM-SHA-1", "SCRAM-SHA-256")

# The stand-in's commands that mongod 6.0 runs on a connection that has not authenticated
# (requiresAuth() false).
NO_AUTH_COMMANDS = frozenset((
    "hello", "isMaster", "ismaster", "saslStart", "saslContinue", "ping", "buildInfo",
    "buildinfo",
    # connection_status.cpp: requiresAuth() is false (it says who, if anyone, is logged in).
    "connectionStatus"))

_PARAMS = {  # hash, salt length, iterations: mongod's defaults
    "SCRAM-SHA-1": (hashlib.sha1, 16, 10000),
    "SCRAM-SHA-256": (hashlib.sha256, 28, 15000),
}


def authentication_failed():
    # mongod hides why (unknown user, wrong proof, bad message): the client only learns this.
    return MongoError(18, "AuthenticationFailed", "Authentication failed.")


def _saslprep(text):
    try:
        from pymongo.saslprep import saslprep
    except ImportError:  # pymongo's bson without pymongo: ASCII passwords need no preparation
        return text
    return saslprep(text)


def mongo_password_digest(user, password):
    """SCRAM-SHA-1's password: HEX(MD5(user ":mongo:" password)), as MONGODB-CR had it."""
    return hashlib.md5(("%s:mongo:%s" % (user, password)).encode("utf-8")).hexdigest()


class _Credential:
    """What mongod stores for one mechanism: salt, iterations, StoredKey, ServerKey."""

    def __init__(self, mechanism, user, password, salt=None, iterations=None):
        digest, salt_len, default_iterations = _PARAMS[mechanism]
        self.digest = digest
        self.salt = salt if salt is not None else os.urandom(salt_len)
        self.iterations = iterations or default_iterations
        if mechanism == "SCRAM-SHA-1":
            secret = mongo_password_digest(user, password)
        else:
            secret = _saslprep(password)
        salted = hashlib.pbkdf2_hmac(digest().name, secret.encode("utf-8"), self.salt,
                                     self.iterations)
        client_key = hmac.new(salted, b"Client Key", digest).digest()
        self.stored_key = digest(client_key).digest()
        self.server_key = hmac.new(salted, b"Server Key", digest).digest()


class Users:
    """The stand-in's one user; `parse("user:password")` builds it from the command line."""

    def __init__(self, user, password):
        if not user:
            raise ValueError("the user name is empty")
        self.user = user
        self.credentials = {m: _Credential(m, user, password) for m in MECHANISMS}
        self.others = {}    # more users of admin (--user): name -> (credentials, roles)

    def add(self, text):
        """Adds a user from "user:password:role@db" (role: read, readWrite or root)."""
        user, _, rest = text.partition(":")
        password, sep, grant = rest.rpartition(":")
        role, at, db = grant.partition("@")
        if not user or not sep or not at or not db or role not in ("read", "readWrite", "root"):
            raise ValueError("expected USER:PASSWORD:ROLE@DB with ROLE read, readWrite or "
                             "root, got %r" % text)
        creds = {m: _Credential(m, user, password) for m in MECHANISMS}
        self.others[user] = (creds, [(role, db)])

    def roles_of(self, user):
        """[(role, db)] of an admin user: the --auth one is root."""
        if user == self.user:
            return [("root", "admin")]
        return self.others[user][1] if user in self.others else []

    @classmethod
    def parse(cls, text):
        user, sep, password = text.partition(":")
        if not sep:
            raise ValueError("expected USER:PASSWORD, got %r" % text)
        return cls(user, password)

    def lookup(self, db, user):
        """The credentials of db.user, or None."""
        if db != AUTH_DB:
            return None
        if user == self.user:
            return self.credentials
        return self.others[user][0] if user in self.others else None


class Conversation:
    """One SASL conversation on one connection (mongod's AuthenticationSession)."""

    def __init__(self, users, mechanism, db, skip_empty_exchange):
        self.users = users
        self.mechanism = mechanism
        self.db = db
        self.skip_empty_exchange = skip_empty_exchange
        self.step = 0
        self.credential = None
        self.user = None
        self.nonce = None
        self.auth_message = None
        self.done = False

    def next(self, data):
        """Runs one step on the client's message: (done, server message); raises
        AuthenticationFailed on any failure."""
        self.step += 1
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError:
            raise authentication_failed()
        if self.step == 1:
            return self._first(text)
        if self.step == 2:
            return self._second(text)
        if self.step == 3 and not self.done:
            self.done = True
            return True, ""
        raise authentication_failed()

    def _first(self, text):
        # client-first-message: gs2-header ("n,," or "y,,", optional a=authzid) + bare part.
        parts = text.split(",", 2)
        if len(parts) < 3 or parts[0] not in ("n", "y") or (parts[1] and
                                                            not parts[1].startswith("a=")):
            raise authentication_failed()
        bare = parts[2]
        fields = [f for f in bare.split(",") if f]
        if len(fields) < 2 or not fields[0].startswith("n=") or len(fields[0]) < 3 \
                or not fields[1].startswith("r=") or len(fields[1]) < 6:
            raise authentication_failed()
        user = fields[0][2:].replace("=2C", ",").replace("=3D", "=")
        creds = self.users.lookup(self.db, user)
        if creds is None:
            raise authentication_failed()
        self.user = user
        self.credential = creds[self.mechanism]
        self.nonce = fields[1][2:] + base64.b64encode(os.urandom(24)).decode("ascii")
        server_first = "r=%s,s=%s,i=%d" % (self.nonce, base64.b64encode(
            self.credential.salt).decode("ascii"), self.credential.iterations)
        self.auth_message = bare + "," + server_first
        return False, server_first

    def _second(self, text):
        # client-final-message: c=biws,r=<nonce>,p=<proof>
        without_proof, sep, last = text.rpartition(",")
        if not sep or not last.startswith("p=") or len(last) < 3:
            raise authentication_failed()
        fields = [f for f in without_proof.split(",") if f]
        if len(fields) < 2 or not fields[0].startswith("c=") or fields[1] != "r=" + self.nonce:
            raise authentication_failed()
        try:
            proof = base64.b64decode(last[2:], validate=True)
        except ValueError:
            raise authentication_failed()
        cred = self.credential
        auth_message = (self.auth_message + "," + without_proof).encode("utf-8")
        signature = hmac.new(cred.stored_key, auth_message, cred.digest).digest()
        if len(proof) != len(signature):
            raise authentication_failed()
        client_key = bytes(a ^ b for a, b in zip(proof, signature))
        if not hmac.compare_digest(cred.digest(client_key).digest(), cred.stored_key):
            raise authentication_failed()
        server_signature = hmac.new(cred.server_key, auth_message, cred.digest).digest()
        self.done = self.skip_empty_exchange
        return self.done, "v=" + base64.b64encode(server_signature).decode("ascii")


def _payload_bytes(payload):
    if isinstance(payload, (bytes, Binary)):
        return bytes(payload)
    if isinstance(payload, str):
        try:
            return base64.b64decode(payload, validate=True)
        except ValueError:
            raise MongoError(2, "BadValue", "Invalid base64 in SASL payload")
    raise MongoError(14, "TypeMismatch",
                     "BSON field 'saslStart.payload' is the wrong type '%s', expected types "
                     "'[string, binData]'" % type(payload).__name__)


def _reply(done, message, as_string):
    payload = message.encode("utf-8")
    return {"conversationId": 1, "done": done,
            "payload": base64.b64encode(payload).decode("ascii") if as_string
            else Binary(payload, 0)}


def _step(conn, conversation, payload):
    data = _payload_bytes(payload)
    try:
        done, message = conversation.next(data)
    except MongoError:
        conn.sasl = None
        raise
    if done:
        conn.sasl = None
        conn.user = "%s.%s" % (conversation.db, conversation.user)
    return done, message


def _start(users, conn, body, db):
    mechanism = body.get("mechanism")
    if mechanism not in MECHANISMS:
        raise MongoError(334, "MechanismUnavailable",
                         "Received authentication for mechanism %s which is not enabled"
                         % mechanism)
    options = body.get("options")
    skip = bool(isinstance(options, dict) and options.get("skipEmptyExchange"))
    conversation = Conversation(users, mechanism, db, skip)
    conn.sasl = conversation
    done, message = _step(conn, conversation, body.get("payload"))
    return _reply(done, message, isinstance(body.get("payload"), str))


def cmd_sasl_start(ctx):
    users = ctx.server.auth
    if users is None:
        raise MongoError(334, "MechanismUnavailable",
                         "Received authentication for mechanism %s which is not enabled"
                         % ctx.body.get("mechanism"))
    return _start(users, ctx.conn, ctx.body, ctx.db)


def cmd_sasl_continue(ctx):
    conn = ctx.conn
    conversation = getattr(conn, "sasl", None)
    if ctx.body.get("conversationId") != 1:
        raise MongoError(17, "ProtocolError", "sasl: Mismatched conversation id")
    if conversation is None:
        raise MongoError(17, "ProtocolError", "No SASL session state found")
    payload = ctx.body.get("payload")
    done, message = _step(conn, conversation, payload)
    return _reply(done, message, isinstance(payload, str))


def hello_fields(ctx, reply):
    """Adds saslSupportedMechs and the speculativeAuthenticate reply to a handshake."""
    users = ctx.server.auth
    if users is None:
        return
    body = ctx.body
    mechs = body.get("saslSupportedMechs")
    if isinstance(mechs, str):
        db, _, user = mechs.partition(".")
        if users.lookup(db, user) is not None:
            reply["saslSupportedMechs"] = list(MECHANISMS)
    spec = body.get("speculativeAuthenticate")
    if isinstance(spec, dict) and spec.get("saslStart") and isinstance(spec.get("db"), str):
        try:
            reply["speculativeAuthenticate"] = _start(users, ctx.conn, spec, spec["db"])
        except MongoError:
            # mongod: "Treat failure like we never even got a speculative start."
            ctx.conn.sasl = None


def check(server, conn, name):
    """Raises 13 Unauthorized for a command this connection may not run yet."""
    if server.auth is not None and getattr(conn, "user", None) is None \
            and name not in NO_AUTH_COMMANDS:
        raise MongoError(13, "Unauthorized", "command %s requires authentication" % name)


COMMANDS = {"saslStart": cmd_sasl_start, "saslContinue": cmd_sasl_continue}
