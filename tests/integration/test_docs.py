"""The Lua code blocks of docs/*.md and README.md run as written (issue 26):
a whole script passes `flowwarden check`, a spec passes `flowwarden test`, a
fragment compiles. The convention is described in docs/testing.md ("Code
blocks in the docs"): a block's kind follows from its contents, and a
`<!-- doc-test: ... -->` comment on the line before the fence overrides it."""
import glob
import os
import re
import shutil
import subprocess
import tempfile
import unittest

from fwtest import BINARY, SOURCE_DIR, clean_env

DOCS = sorted(glob.glob(os.path.join(SOURCE_DIR, "docs", "*.md"))) + [
    os.path.join(SOURCE_DIR, "README.md")]
FENCE = re.compile(r"^(\s*)```lua\s*$")
MARKER = re.compile(r"^\s*<!--\s*doc-test:\s*(.*?)\s*-->\s*$")
MODES = ("check", "test", "compile", "skip")
# As the examples run: no connection is made, the URI names the database.
CHECK_ENV = {"FLOWWARDEN_URI": "mongodb://127.0.0.1:27017/shop?replicaSet=rs0"}
LUAC = shutil.which("luac5.4") or shutil.which("luac")


class Block:
    def __init__(self, doc, line, code, marker):
        self.doc, self.line, self.code = doc, line, code
        self.where = "%s:%d" % (os.path.relpath(doc, SOURCE_DIR), line)
        self.env, self.modules, self.reason, self.cwd = {}, [], None, SOURCE_DIR
        words = marker.split() if marker is not None else []
        if words:
            self.mode = words[0].rstrip(":")
            self.reason = " ".join(words[1:])
        elif re.search(r"\bdescribe\s*\(", code):
            self.mode = "test"
        elif re.search(r"\bfw\.stream\s*\{", code):
            self.mode = "check"
        else:
            self.mode = "compile"
        if self.mode != "skip":
            for w in words[1:]:
                kind, _, value = w.partition("=")
                if kind == "env" and "=" in value:
                    name, _, v = value.partition("=")
                    self.env[name] = v
                elif kind == "module" and value:
                    self.modules.append(value)
                elif kind == "cwd" and value:
                    self.cwd = os.path.join(SOURCE_DIR, value)
                else:
                    raise ValueError("%s: bad doc-test option %r (env=NAME=value, module=NAME "
                                     "or cwd=DIR)" % (self.where, w))


def blocks():
    """Every ```lua block of the docs, with its 1-based line number."""
    found = []
    for doc in DOCS:
        with open(doc, encoding="utf-8") as f:
            lines = f.read().split("\n")
        i = 0
        while i < len(lines):
            m = FENCE.match(lines[i])
            if not m:
                i += 1
                continue
            start, indent, body = i, m.group(1), []
            i += 1
            while i < len(lines) and lines[i].strip() != "```":
                body.append(lines[i][len(indent):] if lines[i].startswith(indent) else lines[i])
                i += 1
            prev = start - 1
            while prev >= 0 and not lines[prev].strip():
                prev -= 1
            marker = MARKER.match(lines[prev]) if prev >= 0 else None
            found.append(Block(doc, start + 1, "\n".join(body) + "\n",
                               marker.group(1) if marker else None))
            i += 1
    return found


class StandInVersions(unittest.TestCase):
    """Issue 38: testing.md said in one place that --server-version 7.0 adds
    $toHashedIndexKey and in another that it is not modelled, and never said
    that the partition tests need 7.0."""

    def setUp(self):
        with open(os.path.join(SOURCE_DIR, "docs", "testing.md"), encoding="utf-8") as f:
            self.text = f.read()

    def test_no_clause_calls_what_the_standin_plays_unmodelled(self):
        clauses = re.split(r"[.;]\s", " ".join(self.text.split()))
        unmodelled = [c for c in clauses if "not modelled" in c]
        self.assertTrue(unmodelled)
        for c in unmodelled:
            self.assertNotIn("$toHashedIndexKey", c)
            self.assertNotRegex(c, r"\b7\.0 and\s+8\.0 behaviour")

    def test_every_test_that_needs_version_7_0_is_named(self):
        pattern = re.compile(r'standin_args = \("--server-version", "7\.0"\)')
        needing = set()
        for path in glob.glob(os.path.join(SOURCE_DIR, "tests", "*", "test_*.py")):
            with open(path, encoding="utf-8") as f:
                if pattern.search(f.read()):
                    needing.add(os.path.basename(path)[:-3])
        self.assertIn("test_partitions", needing)
        for name in sorted(needing):
            self.assertIn(name, self.text)
        self.assertIsNotNone(
            re.search(r"Partitioned streams [^#]* start it with `--server-version 7\.0`",
                      " ".join(self.text.split())),
            "testing.md does not say the partition tests start the stand-in as 7.0")


class DocBlocks(unittest.TestCase):

    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.TemporaryDirectory()
        cls.blocks = blocks()

    @classmethod
    def tearDownClass(cls):
        cls.tmp.cleanup()

    def write(self, block, name):
        d = tempfile.mkdtemp(dir=self.tmp.name)
        for module in block.modules:
            with open(os.path.join(d, module + ".lua"), "w") as f:
                f.write("return {}\n")
        path = os.path.join(d, name)
        with open(path, "w") as f:
            f.write(block.code)
        return path

    def run_fw(self, block, args):
        r = subprocess.run([BINARY] + args, capture_output=True, text=True, cwd=block.cwd,
                           env=clean_env(dict(CHECK_ENV, **block.env)), timeout=60,
                           stdin=subprocess.DEVNULL)
        self.assertEqual(r.returncode, 0, "%s (%s):\n%s%s" % (block.where, block.mode, r.stdout,
                                                             r.stderr))

    def test_the_docs_have_blocks_of_every_kind(self):
        kinds = {b.mode for b in self.blocks}
        self.assertTrue({"check", "test", "compile"} <= kinds, kinds)
        for b in self.blocks:
            self.assertIn(b.mode, MODES, "%s: unknown doc-test mode %r" % (b.where, b.mode))
            if b.mode == "skip":
                self.assertTrue(b.reason, "%s: doc-test: skip needs a reason" % b.where)

    def test_whole_scripts_pass_check(self):
        for b in self.blocks:
            if b.mode == "check":
                with self.subTest(block=b.where):
                    self.run_fw(b, ["check", self.write(b, "script.lua")])

    def test_specs_pass_flowwarden_test(self):
        for b in self.blocks:
            if b.mode == "test":
                with self.subTest(block=b.where):
                    self.run_fw(b, ["test", self.write(b, "doc_spec.lua")])

    @unittest.skipIf(LUAC is None, "luac5.4 is not installed")
    def test_fragments_compile(self):
        for b in self.blocks:
            if b.mode == "compile":
                with self.subTest(block=b.where):
                    # A chunk, or fields of a table such as fw.stream { ... }'s.
                    errors = []
                    for code in (b.code, "return {\n" + b.code + "}\n"):
                        r = subprocess.run([LUAC, "-p", "-"], input=code, capture_output=True,
                                           text=True, timeout=10)
                        if r.returncode == 0:
                            break
                        errors.append(r.stderr.strip())
                    self.assertEqual(r.returncode, 0, "%s: %s" % (b.where, "; ".join(errors)))


if __name__ == "__main__":
    unittest.main()
