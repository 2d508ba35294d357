"""Shared by the operator, the reference host and the conformance suite: identity, digest, Forms."""
