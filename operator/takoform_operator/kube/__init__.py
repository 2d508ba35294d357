"""The Kubernetes side: CRs to core values and back (crs), status writes, kopf handlers."""
