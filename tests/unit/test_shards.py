"""kube.shards without an API server to reach: a member whose Lease was never written acts on
nothing, and stops at its renew deadline."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from kubernetes import client as k8s

from takoform_operator.kube.leader import LostLease
from takoform_operator.kube.loops import ReconcileLoops
from takoform_operator.kube.shards import ShardConfig, ShardMembership, lease_name


def test_lease_names_are_dns_names() -> None:
    assert lease_name("takoform", "Pod_1.x") == "takoform-shard-pod-1.x"
    assert len(lease_name("r", "a" * 300)) == 253


def test_a_member_that_never_wrote_its_lease_acts_on_nothing() -> None:
    """Its view is not published until the write lands: until then (here: never, nothing
    listens on port 1) it serves no CR, and it gives up at its renew deadline."""
    started: list[str] = []

    async def run(body: Any) -> float:
        started.append(body["metadata"]["name"])
        return 60.0

    async def scenario() -> ShardMembership:
        unreachable = k8s.ApiClient(k8s.Configuration(host="http://127.0.0.1:1"))
        member = ShardMembership(
            ShardConfig(namespace="ops", ring="r", identity="m", lease_seconds=3,
                        renew_deadline_seconds=1, retry_seconds=0.2),
            k8s.CoordinationV1Api(unreachable),
        )  # fmt: skip
        member.loops = ReconcileLoops(run, concurrency=2, watched_annotations=(), finalizer="f")
        for i in range(5):
            body = {"metadata": {"namespace": "ops", "name": f"cr-{i}", "uid": f"u{i}"}}
            assert not member.admit(f"u{i}", body)
        with pytest.raises(LostLease):
            await member.run()
        await member.loops.close()
        return member

    member = asyncio.run(scenario())
    assert member.lost and member.published is None
    assert not member.serving and started == []
