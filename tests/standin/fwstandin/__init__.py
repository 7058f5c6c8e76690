"""MongoDB-wire-compatible stand-in used by flowwarden's tests, benchmarks and demo."""
