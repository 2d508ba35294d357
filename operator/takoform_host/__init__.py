"""The Takoform reference host: the v1alpha3 host API of docs/host-api.md over HTTP.

A Starlette application served by uvicorn, with durable SQLite storage, asynchronous operations,
switchable misbehaviours (one per conformance check) and fault controls for the operator's tests.
See docs/reference-host.md.
"""

API_PREFIX = "/v1alpha3"
ADMIN_PREFIX = "/admin/v1"
