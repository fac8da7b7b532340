"""Declared state machines: every entity with a status has one table of the moves it may make, and
every write of its status goes through :meth:`Machine.move` (or, for a guarded bulk UPDATE, names
its ``from``/``to`` through :meth:`Machine.allows` in the statement it builds). Pure.

The instance's and the job's tables predate this module and live beside their services
(``compute.lifecycle``, ``scheduling.lifecycle``); the others are declared where their service is:
holds (``compute.holds.HOLD``), invoices (``billing.invoices.INVOICE``), student verifications
(``billing.student.VERIFICATION``) and webhook deliveries (``notify.webhooks.DELIVERY``)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Generic, TypeVar

from danlu.core.errors import Conflict

S = TypeVar("S", bound=StrEnum)


@dataclass(frozen=True)
class Machine(Generic[S]):
    entity: str  # what a person calls it: "hold", "invoice" …
    initial: S
    moves: Mapping[S, frozenset[S]]  # every state, with the states it may move to (none: final)

    def __post_init__(self) -> None:
        states = set(type(self.initial))
        if set(self.moves) != states:
            missing = sorted(map(str, states - set(self.moves)))
            raise ValueError(f"{self.entity}: the table must list every state once: {missing}")
        reached, todo = {self.initial}, [self.initial]
        while todo:
            for nxt in self.moves[todo.pop()]:
                if nxt not in reached:
                    reached.add(nxt)
                    todo.append(nxt)
        if reached != states:
            raise ValueError(f"{self.entity}: states no move reaches: {sorted(map(str, states - reached))}")

    def allows(self, current: S, target: S) -> bool:
        return target in self.moves[current]

    def final(self, state: S) -> bool:
        return not self.moves[state]

    def move(self, current: str, target: S, action: str) -> S:
        """``target`` if the table allows it from ``current``, else 409 ``invalid_state``."""
        state = type(self.initial)(current)
        if not self.allows(state, target):
            raise Conflict(
                "invalid_state", f"cannot {action} a {self.entity} that is {state.value}", status=state.value
            )
        return target
