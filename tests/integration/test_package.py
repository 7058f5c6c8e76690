"""The DEB package (issue 13): cpack builds flowwarden_VERSION_ARCH.deb from the build tree the
tests run against; its control fields and Depends; what it installs where; and the packaged
binary, extracted with `dpkg -x` into a scratch root, checking an example and running a script
against the stand-in without reading anything of the source or build tree."""
import glob
import os
import re
import shutil
import subprocess
import tempfile
import unittest
from unittest import mock

import fwtest
from fwtest import REAL_BINARY, SOURCE_DIR, StandInTestCase, clean_env

CPACK = shutil.which("cpack")
# REAL_BINARY: under FW_TEST_AUTH, BINARY is the harness's wrapper in a temporary directory.
BUILD_DIR = os.path.dirname(os.path.abspath(REAL_BINARY))
CPACK_TIMEOUT = 90   # cpack re-runs `make preinstall`: quick when the build tree is up to date
NEEDED = re.compile(r"\(NEEDED\)\s+Shared library: \[([^\]]+)\]")


def output(args, **kw):
    return subprocess.run(args, capture_output=True, text=True, check=True, timeout=30,
                          stdin=subprocess.DEVNULL, **kw).stdout


def package_of_library(soname):
    """The Debian package that provides the shared library the dynamic loader finds for
    soname, found through `ldconfig -p` and `dpkg -S` (which may also list other
    architectures' copies, e.g. libc6-i386 for libc.so.6: only the loaded file counts)."""
    path = None
    ldconfig = "/sbin/ldconfig" if os.path.exists("/sbin/ldconfig") else "ldconfig"
    for line in output([ldconfig, "-p"]).splitlines():
        parts = line.strip().split(" => ")
        if len(parts) == 2 and parts[0].split(" (")[0] == soname:
            path = os.path.realpath(parts[1])
            break
    if path is None:
        raise AssertionError("ldconfig -p does not know %s" % soname)
    owners = set()
    for line in output(["dpkg", "-S", "*/" + soname]).splitlines():
        pkgs, _, owned = line.partition(": ")
        if os.path.realpath(owned) == path:
            owners.update(p.strip().split(":")[0] for p in pkgs.split(","))
    if len(owners) != 1:
        raise AssertionError("%s (%s) belongs to %s" % (soname, path, sorted(owners) or "nobody"))
    return owners.pop()


class DebPackage(StandInTestCase):
    """One package built for the whole class, extracted into a scratch root."""

    @classmethod
    def setUpClass(cls):
        if CPACK is None:
            raise unittest.SkipTest("cpack not found on PATH (it comes with cmake)")
        config = os.path.join(BUILD_DIR, "CPackConfig.cmake")
        if not os.path.exists(config):
            raise AssertionError("%s is missing: configure the build tree of %s again "
                                 "(cmake -S %s -B %s)"
                                 % (config, REAL_BINARY, SOURCE_DIR, BUILD_DIR))
        cls.work = tempfile.TemporaryDirectory()
        cls.addClassCleanup(cls.work.cleanup)
        out = os.path.join(cls.work.name, "out")
        r = subprocess.run([CPACK, "-G", "DEB", "-B", out, "--config", config],
                           capture_output=True, text=True, timeout=CPACK_TIMEOUT,
                           stdin=subprocess.DEVNULL)
        if r.returncode != 0:
            raise AssertionError("cpack failed (%d):\n%s%s" % (r.returncode, r.stdout, r.stderr))
        cls.debs = sorted(os.path.basename(p) for p in glob.glob(os.path.join(out, "*.deb")))
        if not cls.debs:
            raise AssertionError("cpack made no .deb in %s:\n%s" % (out, r.stdout))
        cls.deb = os.path.join(out, cls.debs[0])
        cls.root = os.path.join(cls.work.name, "root")
        subprocess.run(["dpkg", "-x", cls.deb, cls.root], check=True, timeout=30)
        cls.fw = os.path.join(cls.root, "usr", "bin", "flowwarden")
        cls.examples = os.path.join(cls.root, "usr", "share", "doc", "flowwarden", "examples")
        super().setUpClass()

    def field(self, name):
        return output(["dpkg-deb", "-f", self.deb, name]).strip()

    def test_the_package_is_named_flowwarden_version_arch(self):
        version = output([REAL_BINARY, "version"]).split()[1]
        arch = output(["dpkg", "--print-architecture"]).strip()
        self.assertEqual(self.debs, ["flowwarden_%s_%s.deb" % (version, arch)])
        self.assertEqual((self.field("Package"), self.field("Version"),
                          self.field("Architecture")), ("flowwarden", version, arch))

    def test_control_names_maintainer_section_and_description_and_no_homepage(self):
        self.assertRegex(self.field("Maintainer"), r"^[^<>]+ <[^<>@\s]+@[^<>@\s]+>$")
        self.assertEqual(self.field("Section"), "database")
        self.assertTrue(self.field("Description").startswith(
            "MongoDB change streams handled by Lua scripts"), self.field("Description"))
        self.assertEqual(self.field("Homepage"), "")

    def test_depends_names_the_package_of_every_library_the_binary_links(self):
        depends = self.field("Depends")
        named = {d.strip().split(" ")[0] for d in depends.split(",")}
        needed = NEEDED.findall(output(["readelf", "-d", self.fw]))
        self.assertEqual(named, {package_of_library(lib) for lib in needed}, depends)
        for pkg in ("libmongoc-1.0-0", "libbson-1.0-0", "liblua5.4-0", "lua-cjson", "libcurl4"):
            self.assertIn(pkg, named)

    def test_it_installs_the_binary_docs_examples_and_unit_and_nothing_else(self):
        doc = "usr/share/doc/flowwarden/"
        expected = {"usr/bin/flowwarden", "usr/lib/systemd/system/flowwarden.service",
                    doc + "README.md", doc + "LICENSE"}
        expected |= {doc + "docs/" + os.path.basename(p)
                     for p in glob.glob(os.path.join(SOURCE_DIR, "docs", "*.md"))}
        expected |= {doc + "examples/" + os.path.basename(p)
                     for p in glob.glob(os.path.join(SOURCE_DIR, "examples", "*.lua"))}
        files = set()
        for d, _, names in os.walk(self.root):
            files |= {os.path.relpath(os.path.join(d, n), self.root) for n in names}
        self.assertEqual(files, expected)
        self.assertTrue(os.access(self.fw, os.X_OK))

    def test_the_unit_runs_the_packaged_binary(self):
        with open(os.path.join(self.root, "usr/lib/systemd/system/flowwarden.service")) as f:
            unit = f.read()
        self.assertNotIn("@FW_", unit)
        self.assertRegex(unit, r"(?m)^ExecStart=/usr/bin/flowwarden run /etc/flowwarden/\S+\.lua ")
        self.assertIn("\nExecReload=/bin/kill -HUP $MAINPID\n", unit)

    def test_the_packaged_binary_checks_an_example(self):
        example = os.path.join(self.examples, "orders.lua")
        r = subprocess.run([self.fw, "check", example], capture_output=True, text=True,
                           timeout=30, cwd=self.tmp.name, env=clean_env(),
                           stdin=subprocess.DEVNULL)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn('stream "order-watcher"', r.stdout)

    def test_the_packaged_binary_reads_nothing_of_the_source_or_build_tree(self):
        # The Lua library is embedded in the binary; nothing may come from the tree it was
        # built in. strace lists every file name the process and its threads touch.
        strace = shutil.which("strace")
        if strace is None:
            self.skipTest("strace not installed (setup.sh installs it)")
        trace = os.path.join(self.tmp.name, "trace")
        env = {k: v for k, v in clean_env().items() if not k.startswith("LUA_")}
        if os.environ.get("FW_SANITIZED") == "1":
            # LeakSanitizer cannot run under ptrace (it aborts the process): the
            # other tests of the sanitized build look for leaks. ASan's log_path
            # lies in the build tree (it makes the directory at start-up), so a
            # report goes to stderr here, and fails the exit status check below.
            options = [o for o in env.get("ASAN_OPTIONS", "").split(":")
                       if o and not o.startswith(("log_path=", "detect_leaks="))]
            env["ASAN_OPTIONS"] = ":".join(options + ["detect_leaks=0"])
            # The same for TSan's log_path, and its suppressions file lies in the
            # source tree: `check` starts no libmongoc thread, so it needs none.
            options = [o for o in env.get("TSAN_OPTIONS", "").split(":")
                       if o and not o.startswith(("log_path=", "suppressions="))]
            env["TSAN_OPTIONS"] = ":".join(options)
        r = subprocess.run([strace, "-f", "-qq", "-e", "trace=%file", "-o", trace, self.fw,
                            "check", os.path.join(self.examples, "orders.lua")],
                           capture_output=True, text=True, timeout=30, cwd=self.tmp.name,
                           env=env, stdin=subprocess.DEVNULL)
        if r.returncode != 0 and "ptrace" in r.stderr:
            self.skipTest("strace cannot trace here: " + r.stderr.strip())
        self.assertEqual(r.returncode, 0, r.stderr)
        with open(trace) as f:
            calls = f.read().splitlines()
        self.assertTrue(any("orders.lua" in c for c in calls), "strace saw nothing")
        tree = [c for c in calls if SOURCE_DIR in c or BUILD_DIR in c]
        self.assertEqual(tree, [])

    def test_the_packaged_binary_runs_a_script_against_the_stand_in(self):
        path = self.script("""
            fw.stream { name = "packaged", collection = "orders",
              on_insert = function(ctx) report({ id = ctx:document_key()._id }) end }
            """)
        with mock.patch.object(fwtest, "BINARY", self.fw):
            p = self.run_fw(path)
        self.assertEqual(p.proc.args[0], self.fw)
        p.wait_open()
        self.db.orders.insert_one({"_id": 1})
        self.assertEqual(p.wait_reports(1), [{"id": 1}])
        self.assertEqual(p.stop(), 0)
        self.assertEqual(p.count_log("summary: handled=1", stream="packaged"), 1)


if __name__ == "__main__":
    unittest.main()
