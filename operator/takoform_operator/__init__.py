"""The Takoform Kubernetes operator: kopf handlers around a pure reconcile core."""
