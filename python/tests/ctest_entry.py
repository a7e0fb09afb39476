#!/usr/bin/env python3
"""ctest_entry.py - how ctest runs the binding's tests (test python_binding, label python; tests/python.cmake).

    python3 python/tests/ctest_entry.py LIBRARY [pytest arguments]

Exits 77, which ctest reports as skipped, when this Python has no PyTorch or pytest, or when LIBRARY is empty or
missing (a build without -DFA_PYTHON=ON); otherwise runs pytest on python/tests/ with FLASH_STEPS_LIBRARY=LIBRARY
and exits with its status.
"""
import importlib.util
import os
import sys

SKIP = 77


def main():
    library = sys.argv[1] if len(sys.argv) > 1 else ""
    for module in ("torch", "pytest"):
        if importlib.util.find_spec(module) is None:
            print(f"SKIPPED: {sys.executable} cannot import {module} (the binding's tests need PyTorch and pytest)")
            return SKIP
    if not library or not os.path.isfile(library):
        print("SKIPPED: no binding library in this build (configure with -DFA_PYTHON=ON, as `make python` does)")
        return SKIP
    os.environ["FLASH_STEPS_LIBRARY"] = library
    import pytest
    return pytest.main([os.path.dirname(os.path.abspath(__file__)), "-q", "-p", "no:cacheprovider"] + sys.argv[2:])


if __name__ == "__main__":
    sys.exit(main())
