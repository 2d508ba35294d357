"""The `kubectl takoform` plugin: import a host resource as a CR, list Blocked CRs, trace one CR."""
