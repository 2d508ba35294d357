"""The operator's own size limits (core.limits): condition and Event messages are cut at one
cap and say so; host outputs the status could not hold are refused by the codec."""

from __future__ import annotations

import asyncio

import pytest

from takoform_operator.core import limits
from takoform_operator.core.codecs import build_codecs
from takoform_operator.core.conditions import Condition, ConditionType, Reason, merge_conditions
from takoform_operator.core.errors import WrongFieldType

from .synthetic import build, definition_doc, field

# -- messages: cut and say so ----------------------------------------------------------------------


def test_a_condition_message_of_100000_chars_is_cut_and_says_so() -> None:
    condition = Condition(ConditionType.DEGRADED, True, Reason.HOST_REJECTED, "x" * 100_000)
    assert len(condition.message) == limits.CONDITION_MESSAGE_CAP
    assert condition.message.endswith(" ... (cut, 100,000 chars)")
    assert condition.message.startswith("x" * 1000)
    merged = merge_conditions(None, [condition], now="2024-01-01T00:00:00Z", observed_generation=1)
    assert {len(c["message"]) for c in merged} == {limits.CONDITION_MESSAGE_CAP}


def test_an_event_message_of_100000_chars_is_cut_and_says_so() -> None:
    message = limits.event_message("y" * 100_000)
    assert len(message) == limits.EVENT_MESSAGE_CAP == 1024
    assert message.endswith(" ... (cut, 100,000 chars)")


def test_a_short_message_is_left_alone() -> None:
    assert limits.cut("short", 10) == "short"
    assert limits.cut("x" * 10, 10) == "x" * 10


# -- host outputs the status could not hold ------------------------------------------------------


def test_an_output_longer_than_the_status_admits_is_refused_by_the_codec() -> None:
    outputs = [field("endpoint"), field("tags", "array", items="string")]
    definition = build(definition_doc(outputs=outputs))
    ref = definition.ref
    codec = build_codecs([definition])[ref]
    fine = "e" * limits.OUTPUT_STRING_MAX_LENGTH
    assert codec.decode_outputs(ref, {"endpoint": fine}) == {"endpoint": fine}
    with pytest.raises(WrongFieldType, match="longer than 4,096"):
        codec.decode_outputs(ref, {"endpoint": fine + "e"})
    with pytest.raises(WrongFieldType, match="more than 256 items"):
        codec.decode_outputs(ref, {"tags": ["t"] * (limits.OUTPUT_MAX_ITEMS + 1)})


def test_an_event_posted_for_a_cr_is_cut_before_the_framework_sees_it() -> None:
    """kube.events.post hands kopf the cut message (kopf's own queue, read back here)."""
    import kopf
    from kopf._core.engines import posting

    from takoform_operator.core.conditions import Reason
    from takoform_operator.core.outcome import Event
    from takoform_operator.kube.events import post

    async def post_and_read() -> str:
        queue: asyncio.Queue[posting.K8sEvent] = asyncio.Queue()
        posting.event_queue_loop_var.set(asyncio.get_running_loop())
        posting.event_queue_var.set(queue)
        posting.settings_var.set(kopf.OperatorSettings())
        body = {
            "apiVersion": "storage.takoform.io/v1",
            "kind": "Bucket",
            "metadata": {"name": "b", "namespace": "n", "uid": "u"},
        }
        post(body, Event("Warning", Reason.HOST_REJECTED, "z" * 100_000))
        return queue.get_nowait().message

    message = asyncio.run(post_and_read())
    assert len(message) == limits.EVENT_MESSAGE_CAP
    assert message.endswith(" ... (cut, 100,000 chars)")
