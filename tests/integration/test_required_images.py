"""A "required" pre- or post-image the server does not have for an event
(pre-images not enabled on the collection when it changed, or expired) fails
the change stream at that event, on every re-open: MongoDB's NoMatchingDocument
(47) or 51770. The stream stops once, before the event, saying which setting
and what to do, instead of re-opening for ever."""
from fwtest import StandInTestCase

SCRIPT = """
    local quick = { initial_delay = "20ms", max_delay = "50ms" }
    fw.stream { name = "pre", collection = "orders", full_document_before_change = "required",
                restart = quick,
                on_insert = function(ctx) report({ key = ctx:document_key()._id }) end,
                on_update = function(ctx) report({ updated = true }) end }
    fw.stream { name = "post", collection = "orders", full_document = "required",
                restart = quick,
                on_insert = function(ctx) end,
                on_update = function(ctx) report({ updated = true }) end }
"""


class RequiredImagesTheServerHasNot(StandInTestCase):
    command_log = True

    def test_the_stream_stops_once_before_the_event_with_the_fix(self):
        p = self.run_fw(self.script(SCRIPT))
        p.wait_open(streams=2)
        self.db.orders.insert_one({"_id": 1})
        # The insert first, alone: in one batch with the update it would fail with it (the
        # server fails the whole getMore), and the stream would stop before both.
        p.wait_reports(1, stream="pre")
        self.db.orders.update_one({"_id": 1}, {"$set": {"x": 1}})
        p.wait_log("STREAM STOPPED", stream="pre")
        p.wait_log("STREAM STOPPED", stream="post")
        # The insert before it was handled; the update never reached a handler.
        self.assertEqual(p.reports(stream="pre"), [{"key": 1}])
        self.assertEqual(p.reports(stream="post"), [])
        (pre,) = [m for m in p.messages("error", stream="pre") if "STREAM STOPPED" in m]
        self.assertIn('the server has no pre-image for an event and full_document_before_change '
                      '= "required": Change stream was configured to require a pre-image', pre)
        self.assertIn('the stream is stopped before the event (the checkpoint stays there). '
                      'Enable them for later events with db.runCommand({collMod: "orders", '
                      'changeStreamPreAndPostImages: {enabled: true}})', pre)
        (post,) = [m for m in p.messages("error", stream="post") if "STREAM STOPPED" in m]
        self.assertIn('the server has no post-image for an event and full_document = '
                      '"required"', post)
        # Stopped, not re-opening: one change stream each, and the process stays up.
        opened = [c for c in self.commands("aggregate")
                  if c["summary"].get("target") == "orders"]
        self.assertEqual(len(opened), 2, opened)
        self.assertEqual(p.count_log("re-opening the change stream"), 0)
        self.assertEqual(p.stop(), 0)
