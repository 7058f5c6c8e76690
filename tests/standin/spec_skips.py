"""Specification tests expected not to pass against the stand-in, each with its reason.

Filled in spec_unified.py's runner; see docs/compatibility.md.
"""

EXPECTED = []


def reason(group, filename, description):
    for g, f, d, why in EXPECTED:
        if g == group and (f is None or f == filename) and (d is None or d in description):
            return why
    return None
