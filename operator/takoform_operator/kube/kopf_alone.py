"""kopf, imported without the official Kubernetes client: kopf imports the client, when it is
installed (the plugin needs it), only to recognise its model objects in `kopf.adopt` and the
like, which the operator never passes it; the client costs an operator process about 9 MiB
once imported. Every module of the operator imports kopf from here, or after it
(tests/unit/test_client_config.py starts a process and looks)."""

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
