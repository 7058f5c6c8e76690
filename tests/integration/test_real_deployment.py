"""FW_TEST_MONGODB_URI (the suite against a real deployment), tested with a
stand-in started here playing the deployment: a test it runs works in a
database of its own and drops it and what it made beside it, never a database
that was there before; a test marked @needs_standin is skipped naming its
control; an unmarked test that reaches for a stand-in control fails saying
what mark it lacks; and the URI a test is given keeps the deployment's
credentials and authentication database."""
import os
import subprocess
import sys
import tempfile
import textwrap
import unittest

import pymongo

from fwtest import (HERE, StandIn, needs_standin, uri_credentials, uri_with_database)

# Run by the child process with FW_TEST_MONGODB_URI set.
MODULE = textwrap.dedent('''\
    import unittest
    from fwtest import StandInTestCase, needs_mongodb, needs_standin

    class Deployment(StandInTestCase):
        def test_writes_in_its_own_databases(self):
            assert self.db_name.startswith("fwt") and "/" + self.db_name + "?" in self.uri, \\
                (self.db_name, self.uri)
            self.db.c.insert_one({"_id": 1})
            self.client[self.db_name + "_other"].c.insert_one({"_id": 2})
            print("DB", self.db_name)

        def test_an_unmarked_fault_fails_naming_the_mark(self):
            self.fail_point("off")

        def test_an_unmarked_kill_fails_naming_the_mark(self):
            self.standin.kill9()

        @needs_standin("fault injection (failCommand)")
        def test_marked(self):
            raise AssertionError("ran")

        @needs_mongodb("99.0", "a feature of the future")
        def test_too_new(self):
            raise AssertionError("ran")

        @needs_mongodb("6.0", "pre- and post-images")
        def test_new_enough(self):
            print("NEW ENOUGH")

    @needs_standin("oplog size (--oplog-max-entries)")
    class MarkedClass(StandInTestCase):
        def test_in_a_marked_class(self):
            raise AssertionError("ran")

    class Configured(StandInTestCase):
        standin_args = ("--oplog-max-entries", "5")

        def test_in_a_configured_class(self):
            raise AssertionError("ran")
    ''')


class UriHelpers(unittest.TestCase):

    def test_the_database_goes_in_the_path_and_credentials_keep_their_source(self):
        self.assertEqual(uri_with_database("mongodb://h1,h2/?replicaSet=rs", "t1"),
                         "mongodb://h1,h2/t1?replicaSet=rs")
        self.assertEqual(uri_with_database("mongodb://h:27017", "t1"), "mongodb://h:27017/t1")
        self.assertEqual(uri_with_database("mongodb+srv://u:p%40w@c.example.net/app?tls=true",
                                           "t1"),
                         "mongodb+srv://u:p%40w@c.example.net/t1?tls=true&authSource=app")
        self.assertEqual(uri_with_database("mongodb://u:p@h/?authSource=x", "t1"),
                         "mongodb://u:p@h/t1?authSource=x")
        self.assertEqual(uri_with_database("mongodb://u:p@h", "t1"),
                         "mongodb://u:p@h/t1?authSource=admin")

    def test_credentials_are_read_decoded(self):
        self.assertEqual(uri_credentials("mongodb://u%2Fx:p%40w@h/db"), ("u/x", "p@w"))
        self.assertIsNone(uri_credentials("mongodb://h/db?replicaSet=rs"))


@needs_standin("own stand-in to play the deployment")
class AgainstADeployment(unittest.TestCase):

    @classmethod
    def setUpClass(cls):
        cls.server = StandIn()
        cls.server.start()
        cls.client = pymongo.MongoClient(cls.server.uri)

    @classmethod
    def tearDownClass(cls):
        cls.client.close()
        cls.server.stop()

    def test_own_databases_dropped_others_kept_marks_skip_unmarked_controls_fail(self):
        # Databases that were there before, one named like a test's would be.
        self.client.keep_me.c.insert_one({"_id": 1})
        self.client["t_test_writes_in_its_own_databases"].c.insert_one({"_id": 1})
        before = sorted(self.client.list_database_names())
        with tempfile.TemporaryDirectory() as d:
            with open(os.path.join(d, "real_case.py"), "w") as f:
                f.write(MODULE)
            env = dict(os.environ, FW_TEST_MONGODB_URI=self.server.uri,
                       PYTHONPATH=os.pathsep.join([HERE, os.environ.get("PYTHONPATH", "")]))
            cp = subprocess.run([sys.executable, "-m", "unittest", "-v", "real_case"], cwd=d,
                                env=env, capture_output=True, text=True, timeout=120)
        out = cp.stdout + cp.stderr
        self.assertIn("Ran 7 tests", out)     # a skipped setUpClass is not counted
        self.assertIn("FAILED (failures=2, skipped=4)", out)
        self.assertRegex(out, r"test_writes_in_its_own_databases .*\.\.\. ok")
        self.assertRegex(out, r"test_marked .*skipped \"needs the stand-in's fault injection "
                              r"\(failCommand\) \(FW_TEST_MONGODB_URI is set\)\"")
        self.assertIn("skipped \"needs the stand-in's oplog size (--oplog-max-entries)", out)
        self.assertIn("skipped \"needs the stand-in's options ('--oplog-max-entries', '5')", out)
        self.assertIn("skipped 'needs MongoDB 99.0+ for a feature of the future; the deployment "
                      "is 6.0'", out)
        self.assertIn("NEW ENOUGH", out)
        self.assertIn('mark the test @needs_standin("fault injection")', out)
        self.assertIn("this test uses the stand-in (standin.kill9) but FW_TEST_MONGODB_URI is set",
                      out)
        self.assertNotIn("AssertionError: ran", out)
        # The test's database and its _other were written, then dropped.
        self.assertRegex(out, r"DB fwt[0-9a-f]{12}_test_writes_in_its_own_databases")
        self.assertEqual(sorted(self.client.list_database_names()), before)
