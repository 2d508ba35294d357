"""Size limits of what the operator writes, and the one helper that cuts a long message.

The generated CRDs bound every string, map and list (a namespace user's spec by the catalog's
bounds, takoform_spec/catalog/bounds.yaml; what the operator writes by the limits below), so
the API server refuses what the operator could not hold. What the operator itself writes must
stay inside those bounds, or its status write is refused and the CR never shows a condition:
messages are cut here (`cut`), and host outputs above the output limits are refused by the
codec (core.codecs.decode_outputs) instead of being copied into the status.
"""

from __future__ import annotations

#: metav1.Condition's own bounds: a condition's message and reason in the CRDs.
CONDITION_MESSAGE_MAX_LENGTH = 32768
CONDITION_REASON_MAX_LENGTH = 1024
#: What the operator writes into a condition message: well below the CRD's maxLength, so a
#: status with every condition of the closed set at full length is still a small write.
CONDITION_MESSAGE_CAP = 4096
#: An Event message: the framework (kopf) keeps at most 1024 characters of a message and cuts
#: the middle silently; cutting it here first says so.
EVENT_MESSAGE_CAP = 1024
#: status.conditions (the closed set has 6 types) and status.remedies (at most 4 today).
CONDITIONS_MAX_ITEMS = 16
REMEDIES_MAX_ITEMS = 16
#: One remedy's text, command or object (names and an import id, shell-quoted).
REMEDY_TEXT_MAX_LENGTH = 8192
#: Timestamps (RFC 3339) and decimal counters the operator writes.
TIMESTAMP_MAX_LENGTH = 64
COUNTER_MAX_LENGTH = 32
#: Host outputs shown in status.outputs: a longer string, a longer list or a wider map from the
#: host is refused by the codec (HostStateUndecodable), never written.
OUTPUT_STRING_MAX_LENGTH = 4096
OUTPUT_MAX_ITEMS = 256
OUTPUT_MAX_PROPERTIES = 256
#: A TakoformHost's status.forms: the FormRefs it serves next to those this build supports.
HOST_FORMS_MAX_ITEMS = 1024

#: Identity strings: object names (DNS subdomains), a host space, an import id (a canonical
#: JSON document naming the space, the name and the exact FormRef), uids, FormRef members.
NAME_MAX_LENGTH = 253
SPACE_MAX_LENGTH = 253
IMPORT_ID_MAX_LENGTH = 2048
UID_MAX_LENGTH = 128
API_VERSION_MAX_LENGTH = 317
KIND_MAX_LENGTH = 63
DEFINITION_VERSION_MAX_LENGTH = 64
SCHEMA_DIGEST_MAX_LENGTH = 71
PACKAGE_DIGEST_MAX_LENGTH = 71


def cut(text: str, cap: int) -> str:
    """`text` if it has at most `cap` characters, else its start and a note saying how long it
    was: `... (cut, 12,345 chars)`; the result has at most `cap` characters."""
    if len(text) <= cap:
        return text
    note = f" ... (cut, {len(text):,} chars)"
    keep = max(cap - len(note), 0)
    return (text[:keep] + note)[:cap]


def condition_message(text: str) -> str:
    return cut(text, CONDITION_MESSAGE_CAP)


def event_message(text: str) -> str:
    return cut(text, EVENT_MESSAGE_CAP)
