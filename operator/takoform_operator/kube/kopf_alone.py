"""kopf, imported without the official Kubernetes client: kopf imports the client, when it is
installed, only to recognise its model objects in `kopf.adopt` and the like, which the operator
never passes it; the client costs about 19 MiB in every operator process. Every module of the
operator imports kopf from here (tests/unit/test_layers.py)."""

from __future__ import annotations

import sys

_hidden = "kopf" not in sys.modules and "kubernetes" not in sys.modules
if _hidden:
    sys.modules["kubernetes"] = None  # type: ignore[assignment]  # `import kubernetes` fails
try:
    import kopf
finally:
    if _hidden:
        del sys.modules["kubernetes"]  # for the plugin's and a credential plugin's import

__all__ = ["kopf"]
