"""Label selectors for sharding: which CRs one operator process reconciles.

The Kubernetes selector syntax, comma-separated requirements that must all hold: `key=value`
(or `==`), `key!=value`, `key in (a,b)`, `key notin (a,b)`, `key` (present), `!key` (absent).
The empty selector matches everything.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

_KEY = r"[A-Za-z0-9]([-A-Za-z0-9_./]*[A-Za-z0-9])?"
_VALUE = r"([A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?)?"
_SET = re.compile(rf"^({_KEY})\s+(in|notin)\s+\((.*)\)$")
_EQUALITY = re.compile(rf"^({_KEY})\s*(==|=|!=)\s*({_VALUE})$")
_EXISTS = re.compile(rf"^(!?)\s*({_KEY})$")


@dataclass(frozen=True)
class Requirement:
    key: str
    operator: str  # in, notin, exists, absent
    values: frozenset[str] = frozenset()

    def matches(self, labels: Mapping[str, str]) -> bool:
        if self.operator == "exists":
            return self.key in labels
        if self.operator == "absent":
            return self.key not in labels
        if self.operator == "in":
            return self.key in labels and labels[self.key] in self.values
        return labels.get(self.key) not in self.values  # notin: an absent key matches


@dataclass(frozen=True)
class LabelSelector:
    requirements: tuple[Requirement, ...] = ()
    text: str = ""

    def matches(self, labels: Mapping[str, str] | None) -> bool:
        return all(r.matches(labels or {}) for r in self.requirements)


def _split(text: str) -> list[str]:
    """Split on the commas that are not inside parentheses."""
    parts, depth, current = [], 0, ""
    for char in text:
        if char == "," and depth == 0:
            parts.append(current)
            current = ""
            continue
        depth += {"(": 1, ")": -1}.get(char, 0)
        if depth < 0:
            raise ValueError(f"unbalanced parentheses in label selector {text!r}")
        current += char
    if depth:
        raise ValueError(f"unbalanced parentheses in label selector {text!r}")
    return [*parts, current]


def parse_selector(text: str | None) -> LabelSelector:
    """Parse a label selector; raises ValueError naming the requirement it cannot read."""
    if not text or not text.strip():
        return LabelSelector()
    requirements = []
    for raw in _split(text):
        part = raw.strip()
        if match := _SET.match(part):
            values = frozenset(v.strip() for v in match.group(4).split(","))
            if not values or not all(re.fullmatch(_VALUE, v) and v for v in values):
                raise ValueError(f"bad value list in label selector requirement {part!r}")
            requirements.append(Requirement(match.group(1), match.group(3), values))
        elif match := _EQUALITY.match(part):
            operator = "notin" if match.group(3) == "!=" else "in"
            requirements.append(Requirement(match.group(1), operator, frozenset({match.group(4)})))
        elif match := _EXISTS.match(part):
            operator = "absent" if match.group(1) else "exists"
            requirements.append(Requirement(match.group(2), operator))
        else:
            raise ValueError(f"cannot read label selector requirement {part!r}")
    return LabelSelector(tuple(requirements), text.strip())
