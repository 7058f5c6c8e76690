"""Stand-in conformance: authentication (--auth USER:PASSWORD), SCRAM-SHA-256 and SCRAM-SHA-1
as mongod 6.0 does them and pymongo negotiates them (the drivers' auth and handshake specs).
libmongoc's side is flowwarden itself connecting with user:password in its URI
(tests/integration/test_secrets.py, and the whole integration suite under FW_TEST_AUTH=1)."""

import base64
import hashlib
import hmac
import json
import os
import subprocess
import sys
import tempfile
import unittest
import urllib.parse

import pymongo
from bson.binary import Binary
from pymongo.errors import OperationFailure

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from standin_process import PYTHON, SCRIPT, StandIn  # noqa: E402
from fwstandin import auth  # noqa: E402

USER = "app"
PASSWORD = "p@ss/w:rd-1"
S = None


def setUpModule():
    global S, LOG
    LOG = tempfile.NamedTemporaryFile(suffix=".jsonl", delete=False).name
    S = StandIn(["--auth", "%s:%s" % (USER, PASSWORD), "--log", LOG])
    S.start()


def tearDownModule():
    assert S.stop() == 0
    os.unlink(LOG)


def uri(user=USER, password=PASSWORD, extra=""):
    return "mongodb://%s:%s@%s/?replicaSet=rs0%s" % (
        urllib.parse.quote(user, safe=""), urllib.parse.quote(password, safe=""), S.host, extra)


def commands():
    with open(LOG) as f:
        return [json.loads(line)["cmd"] for line in f]


class Authenticated(unittest.TestCase):

    def test_right_password_works_with_each_mechanism(self):
        for extra in ("", "&authMechanism=SCRAM-SHA-256", "&authMechanism=SCRAM-SHA-1"):
            with self.subTest(extra=extra):
                c = pymongo.MongoClient(uri(extra=extra))
                c.auth_t.c.insert_one({"m": extra})
                self.assertEqual(c.auth_t.c.find_one({"m": extra})["m"], extra)
                c.close()

    def test_negotiation_and_speculative_authentication(self):
        # pymongo asks for the user's mechanisms and speculatively starts SCRAM-SHA-256 in the
        # handshake, so the conversation needs no saslStart of its own.
        before = len(commands())
        c = pymongo.MongoClient(uri())
        c.admin.command("ping")
        c.close()
        seen = commands()[before:]
        self.assertIn("saslContinue", seen)
        self.assertNotIn("saslStart", seen)

    def test_hello_lists_the_users_mechanisms(self):
        c = pymongo.MongoClient(S.uri)
        r = c.admin.command({"hello": 1, "saslSupportedMechs": "admin." + USER})
        self.assertEqual(r["saslSupportedMechs"], ["SCRAM-SHA-1", "SCRAM-SHA-256"])
        r = c.admin.command({"hello": 1, "saslSupportedMechs": "admin.nobody"})
        self.assertNotIn("saslSupportedMechs", r)
        r = c.admin.command({"hello": 1, "saslSupportedMechs": "other." + USER})
        self.assertNotIn("saslSupportedMechs", r)
        c.close()

    def test_a_failed_speculative_start_is_left_out_of_hello(self):
        c = pymongo.MongoClient(S.uri)
        r = c.admin.command({"hello": 1, "speculativeAuthenticate": {
            "saslStart": 1, "mechanism": "SCRAM-SHA-256", "db": "admin",
            "payload": Binary(b"n,,n=nobody,r=abcdefghijkl")}})
        self.assertEqual(r["ok"], 1.0)
        self.assertNotIn("speculativeAuthenticate", r)
        c.close()


class Refused(unittest.TestCase):

    def assert_auth_failed(self, client):
        with self.assertRaises(OperationFailure) as cm:
            client.auth_t.c.find_one()
        self.assertEqual(cm.exception.code, 18)
        self.assertEqual(cm.exception.details["errmsg"], "Authentication failed.")
        self.assertEqual(cm.exception.details["codeName"], "AuthenticationFailed")

    def test_wrong_password_fails_with_the_servers_error(self):
        for extra in ("", "&authMechanism=SCRAM-SHA-1"):
            with self.subTest(extra=extra):
                c = pymongo.MongoClient(uri(password="wrong", extra=extra),
                                        serverSelectionTimeoutMS=2000)
                self.assert_auth_failed(c)
                c.close()

    def test_unknown_user_and_other_auth_database_fail_alike(self):
        for u in (uri(user="nobody"), uri(extra="&authSource=auth_t")):
            with self.subTest(uri=u):
                c = pymongo.MongoClient(u, serverSelectionTimeoutMS=2000)
                self.assert_auth_failed(c)
                c.close()

    def test_commands_before_authentication_are_refused(self):
        c = pymongo.MongoClient(S.uri)
        for cmd, name in (({"find": "c"}, "find"), ({"insert": "c", "documents": [{}]}, "insert"),
                          ({"listCollections": 1}, "listCollections")):
            with self.subTest(cmd=name):
                with self.assertRaises(OperationFailure) as cm:
                    c.auth_t.command(cmd)
                self.assertEqual(cm.exception.code, 13)
                self.assertEqual(cm.exception.details["codeName"], "Unauthorized")
                self.assertEqual(cm.exception.details["errmsg"],
                                 "command %s requires authentication" % name)
        # The handshake and diagnostics need no user.
        self.assertEqual(c.admin.command("ping")["ok"], 1.0)
        self.assertEqual(c.admin.command("buildInfo")["version"], "6.0.9")
        # An unknown command is unknown before it is unauthorized.
        with self.assertRaises(OperationFailure) as cm:
            c.admin.command("noSuchCommand")
        self.assertEqual(cm.exception.code, 59)
        c.close()


class Conversation(unittest.TestCase):
    """The SASL commands by hand on one connection (maxPoolSize=1)."""

    def setUp(self):
        self.c = pymongo.MongoClient(S.uri, maxPoolSize=1)
        self.addCleanup(self.c.close)

    def client_proof(self, mechanism, client_first_bare, server_first, without_proof):
        cred = auth.Users(USER, PASSWORD).credentials[mechanism]  # only its hash is used
        fields = dict(f.split("=", 1) for f in server_first.split(","))
        secret = (auth.mongo_password_digest(USER, PASSWORD) if mechanism == "SCRAM-SHA-1"
                  else PASSWORD)
        salted = hashlib.pbkdf2_hmac(cred.digest().name, secret.encode(),
                                     base64.b64decode(fields["s"]), int(fields["i"]))
        client_key = hmac.new(salted, b"Client Key", cred.digest).digest()
        stored = cred.digest(client_key).digest()
        message = ",".join((client_first_bare, server_first, without_proof)).encode()
        sig = hmac.new(stored, message, cred.digest).digest()
        server_key = hmac.new(salted, b"Server Key", cred.digest).digest()
        server_sig = hmac.new(server_key, message, cred.digest).digest()
        return (base64.b64encode(bytes(a ^ b for a, b in zip(client_key, sig))).decode(),
                base64.b64encode(server_sig).decode())

    def converse(self, mechanism, skip_empty_exchange):
        bare = "n=%s,r=fyko+d2lbbFgONRv9qkxdawL" % USER
        start = {"saslStart": 1, "mechanism": mechanism, "payload": Binary(b"n,," + bare.encode()),
                 "autoAuthorize": 1}
        if skip_empty_exchange:
            start["options"] = {"skipEmptyExchange": True}
        r = self.c.admin.command(start)
        self.assertEqual((r["conversationId"], r["done"]), (1, False))
        server_first = bytes(r["payload"]).decode()
        nonce, salt, iterations = server_first.split(",")
        self.assertTrue(nonce.startswith("r=fyko+d2lbbFgONRv9qkxdawL"))
        self.assertEqual(len(nonce), 2 + 24 + 32)          # the client's nonce + 24 bytes base64
        self.assertEqual(iterations, "i=%d" % (10000 if mechanism == "SCRAM-SHA-1" else 15000))
        without_proof = "c=biws," + nonce
        proof, server_sig = self.client_proof(mechanism, bare, server_first, without_proof)
        r = self.c.admin.command({"saslContinue": 1, "conversationId": 1, "payload": Binary(
            ("%s,p=%s" % (without_proof, proof)).encode())})
        self.assertEqual(bytes(r["payload"]).decode(), "v=" + server_sig)
        self.assertEqual(r["done"], skip_empty_exchange)
        if not skip_empty_exchange:
            r = self.c.admin.command({"saslContinue": 1, "conversationId": 1,
                                      "payload": Binary(b"")})
            self.assertEqual((r["done"], bytes(r["payload"])), (True, b""))
        self.assertIsNone(self.c.auth_t.c.find_one({"never": 1}))

    def test_scram_sha_256_with_skip_empty_exchange(self):
        self.converse("SCRAM-SHA-256", True)

    def test_scram_sha_1_with_the_empty_exchange(self):
        self.converse("SCRAM-SHA-1", False)

    def test_a_wrong_proof_fails_and_ends_the_conversation(self):
        r = self.c.admin.command({"saslStart": 1, "mechanism": "SCRAM-SHA-256",
                                  "payload": Binary(b"n,,n=app,r=0123456789abcdef")})
        nonce = bytes(r["payload"]).decode().split(",")[0]
        bad = base64.b64encode(b"\0" * 32).decode()
        with self.assertRaises(OperationFailure) as cm:
            self.c.admin.command({"saslContinue": 1, "conversationId": 1,
                                  "payload": Binary(("c=biws,%s,p=%s" % (nonce, bad)).encode())})
        self.assertEqual((cm.exception.code, cm.exception.details["errmsg"]),
                         (18, "Authentication failed."))
        with self.assertRaises(OperationFailure) as cm:
            self.c.admin.command({"saslContinue": 1, "conversationId": 1, "payload": Binary(b"")})
        self.assertEqual(cm.exception.code, 17)
        with self.assertRaises(OperationFailure) as cm:
            self.c.auth_t.c.find_one()
        self.assertEqual(cm.exception.code, 13)

    def test_unknown_mechanism_and_conversation_id(self):
        with self.assertRaises(OperationFailure) as cm:
            self.c.admin.command({"saslStart": 1, "mechanism": "PLAIN", "payload": Binary(b"")})
        self.assertEqual((cm.exception.code, cm.exception.details["codeName"]),
                         (334, "MechanismUnavailable"))
        with self.assertRaises(OperationFailure) as cm:
            self.c.admin.command({"saslContinue": 1, "conversationId": 7, "payload": Binary(b"")})
        self.assertEqual((cm.exception.code, cm.exception.details["errmsg"]),
                         (17, "sasl: Mismatched conversation id"))


class SpecVectors(unittest.TestCase):
    """The auth spec's example conversations (user "user", password "pencil")."""

    def run_vector(self, mechanism, salt, iterations, client_nonce, server_nonce, proof, verifier):
        users = auth.Users("user", "pencil")
        users.credentials[mechanism] = auth._Credential(mechanism, "user", "pencil",
                                                        base64.b64decode(salt), iterations)
        conv = auth.Conversation(users, mechanism, "admin", True)
        done, server_first = conv.next(("n,,n=user,r=" + client_nonce).encode())
        # The server nonce is random: put the spec's in its place.
        conv.nonce = server_nonce
        server_first = "r=%s,s=%s,i=%d" % (server_nonce, salt, iterations)
        conv.auth_message = "n=user,r=%s,%s" % (client_nonce, server_first)
        done, final = conv.next(("c=biws,r=%s,p=%s" % (server_nonce, proof)).encode())
        self.assertEqual((done, final), (True, "v=" + verifier))

    def test_scram_sha_1(self):
        self.run_vector("SCRAM-SHA-1", "rQ9ZY3MntBeuP3E1TDVC4w==", 10000,
                        "fyko+d2lbbFgONRv9qkxdawL",
                        "fyko+d2lbbFgONRv9qkxdawLHo+Vgk7qvUOKUwuWLIWg4l/9SraGMHEE",
                        "MC2T8BvbmWRckDw8oWl5IVghwCY=", "UMWeI25JD1yNYZRMpZ4VHvhZ9e0=")

    def test_scram_sha_256(self):
        self.run_vector("SCRAM-SHA-256", "W22ZaJ0SNY7soEsUEjb6gQ==", 4096,
                        "rOprNGfwEbeRWgbNEkqO",
                        "rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0",
                        "dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ=",
                        "6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4=")


class Options(unittest.TestCase):

    def test_auth_needs_user_and_password(self):
        r = subprocess.run([PYTHON, SCRIPT, "--port", "0", "--auth", "nocolon"],
                           capture_output=True, text=True, timeout=30)
        self.assertEqual(r.returncode, 2)
        self.assertIn("argument --auth: expected USER:PASSWORD", r.stderr)

    def test_without_auth_no_mechanisms_are_offered(self):
        with StandIn() as s:
            c = pymongo.MongoClient(s.uri)
            r = c.admin.command({"hello": 1, "saslSupportedMechs": "admin." + USER})
            self.assertNotIn("saslSupportedMechs", r)
            self.assertIsNone(c.auth_t.c.find_one())
            c.close()


if __name__ == "__main__":
    unittest.main()
