#!/usr/bin/env python3
"""The command line of the chaos soak (tests/support/soak.py, docs/soak.md): the harness
lives with the tests that use it; this is its CLI (`python hack/soak.py --help`)."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "support"))

from soak import main

if __name__ == "__main__":
    sys.exit(main())
