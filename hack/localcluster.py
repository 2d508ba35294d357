#!/usr/bin/env python3
"""The command line of the local control plane (tests/support/localcluster.py,
docs/local-cluster.md): the harness lives with the tests that use it; this
is its CLI (`python hack/localcluster.py --help`)."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "support"))

from localcluster import main

if __name__ == "__main__":
    sys.exit(main())
