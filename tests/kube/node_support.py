"""What the node fixtures (tests/kube/conftest.py) hand to the tests."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from fixtures_kube import KubeCluster


@dataclass
class NodeCluster:
    kube: KubeCluster
    local: Any  # localcluster.LocalCluster
    image: str  # the operator image's name as the kubelet knows it

    @property
    def api_port(self) -> int:
        return int(self.kube.server.rsplit(":", 1)[1])
