"""The operator's pure core: codecs, registry, import ids and reconcile decisions; no I/O."""
