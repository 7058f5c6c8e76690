"""The fw.mongo test fake (lua/flowwarden/testing/mongo_fake.lua, issue 15)
conforms to fw.mongo: every case of mongo_cases.lua runs through fw.mongo
against the stand-in and through the fake in the same handler call
(mongo_fake_conformance.lua), and both give the same result or typed error
(type, message, code, code_name, write_errors, where) and leave the same
documents behind."""
import os

from fwtest import HERE, StandInTestCase, clean_env

SCRIPT = os.path.join(HERE, "mongo_fake_conformance.lua")


class MongoFakeConformanceTest(StandInTestCase):

    def test_fake_and_fw_mongo_agree_on_every_case(self):
        p = self.run_fw(SCRIPT, env=clean_env({"FW_CASES_DB": self.db_name}))
        p.wait_open()
        self.db.trigger.insert_one({"_id": 1})
        p.wait_until(lambda: any("done" in r for r in p.reports()), timeout=120,
                     what="the conformance cases")
        reports = p.reports()
        done = [r for r in reports if "done" in r][0]["done"]
        cases = [r for r in reports if "done" not in r]
        self.assertEqual(len(cases), done)
        self.assertGreater(done, 100)
        for r in cases:
            with self.subTest(case=r["name"]):
                self.assertEqual(r["fake"], r["real"])
        self.assertEqual(p.stop(), 0)
