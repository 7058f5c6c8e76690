"""Shared pieces of the chaos suite (tests/chaos/README): the integration
harness, the scale factor of the --long variant, and the one-line figures
each scenario prints."""
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "integration"))

from fwtest import PRELUDE, StandInTestCase  # noqa: E402,F401  (re-exported)

# FW_CHAOS_LONG=1: every scenario runs SCALE times longer (release checks).
LONG = os.environ.get("FW_CHAOS_LONG", "") not in ("", "0")
SCALE = 10 if LONG else 1


def figures(scenario, **values):
    """Prints the scenario's figures to stderr, one line, and returns them."""
    text = " ".join("%s=%s" % (k, v) for k, v in values.items())
    sys.stderr.write("\nCHAOS %s: %s\n" % (scenario, text))
    sys.stderr.flush()
    return values

