"""What the suite addresses on a host: the API prefixes and the decimal strings of docs/host-api.md.

The closed sets the suite holds a host to (error codes and their status, operation states,
condition types and reasons) are the shared names of `takoform_spec.host_api`.
"""

from __future__ import annotations

import re

API = "/v1alpha3"
ADMIN = "/admin/v1"
DECIMAL = re.compile(r"^(0|[1-9][0-9]*)$")
