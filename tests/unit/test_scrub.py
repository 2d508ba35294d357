"""core.scrub: every known secret value leaves host words, however it was quoted or cut."""

from __future__ import annotations

import json
from dataclasses import replace

from takoform_operator.core.conditions import Reason
from takoform_operator.core.outcome import Event, NextLook, degraded
from takoform_operator.core.scrub import REDACTED, clip, known_secrets, scrub, scrub_outcome
from takoform_operator.core.state import ResourceView, State
from takoform_operator.registry_data import load_registry
from takoform_spec.identity import FormLine

REGISTRY = load_registry()
KEY = "-----BEGIN PRIVATE KEY-----\nMIIEvQIBADANBgkqhkiG9w0BAQEFAASC\n-----END PRIVATE KEY-----"


def test_a_value_is_scrubbed_as_written_json_escaped_and_repr_quoted() -> None:
    for text in (
        f"refused: {KEY}",
        f"refused: {json.dumps({'privateKey': KEY})}",
        f"refused: {KEY!r}",
    ):
        scrubbed = scrub(text, {KEY})
        assert "MIIEvQ" not in scrubbed and REDACTED in scrubbed, scrubbed


def test_the_fragment_a_cut_left_before_its_mark_is_scrubbed() -> None:
    secret = "s3cr3t-password-value"
    cut = clip("x" * 20 + secret, 30)
    assert secret[:10] in cut
    scrubbed = scrub(cut, {secret})
    assert secret[:4] not in scrubbed and scrubbed.startswith("x" * 20 + REDACTED), scrubbed


def test_short_values_are_not_searched_for() -> None:
    assert scrub("generation 1 of abc", {"1", "abc"}) == "generation 1 of abc"


def test_every_condition_and_event_message_of_an_outcome_is_scrubbed() -> None:
    outcome = degraded(State(), Reason.INVALID_SPEC, "bad: hunter22", NextLook.POLL)
    outcome = replace(outcome, events=(Event("Warning", Reason.INVALID_SPEC, "hunter22!"),))
    scrubbed = scrub_outcome(outcome, {"hunter22"})
    assert all("hunter22" not in c.message for c in scrubbed.conditions)
    assert [e.message for e in scrubbed.events] == [f"{REDACTED}!"]
    assert scrub_outcome(outcome, set()) is outcome


def _postgres(outputs: dict[str, object]) -> ResourceView:
    ref = REGISTRY.default_create_ref(FormLine("database.takoform.io/v1", "PostgresInstance"))
    assert ref is not None
    return ResourceView(
        form_ref=ref, space="s", name="n", uid="u", generation="1", revision="1",
        spec={}, outputs=outputs,
    )  # fmt: skip


def test_known_secrets_are_the_sensitive_outputs_read_and_the_values_written() -> None:
    view = _postgres({"host": "db.example.net", "port": 5432, "password": "pw-1234"})
    assert known_secrets(REGISTRY, view, ["old-pw-5678"]) == {"pw-1234", "old-pw-5678"}
    assert known_secrets(REGISTRY, None, ["old-pw-5678"]) == {"old-pw-5678"}


def test_outputs_that_do_not_decode_are_still_known_by_name() -> None:
    # An undeclared output makes the document undecodable: its sensitive ones are still secret.
    view = _postgres({"password": "pw-1234", "somethingUndeclared": 1})
    assert known_secrets(REGISTRY, view) == {"pw-1234"}
