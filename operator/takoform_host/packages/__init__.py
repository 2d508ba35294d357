"""Package files shipped with the reference host (definition files; data, not code)."""
