"""pyopencl's own test files (2026.1.4, MIT: LICENSE here), vendored for tests/test_pyopencl_suite.py,
which copies them to a folder of its own and runs them there; never collected as this project's
tests."""

collect_ignore_glob = ["test_*.py"]
