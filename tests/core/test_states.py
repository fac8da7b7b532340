"""Declared state machines (issue 27): every status outside instances and jobs has one table, checked
when it is declared (every state listed, every state reachable), and a move the table does not allow is
a 409 ``invalid_state`` that changes nothing."""

from __future__ import annotations

from enum import StrEnum

import pytest

from danlu.billing.invoices import INVOICE, InvoiceStatus
from danlu.billing.student import VERIFICATION, Verdict
from danlu.compute.lifecycle import HOLD, HoldState
from danlu.core.errors import Conflict
from danlu.core.states import Machine
from danlu.notify.webhooks import DELIVERY, Delivery


class Door(StrEnum):
    SHUT = "shut"
    OPEN = "open"
    GONE = "gone"


def test_a_table_must_list_every_state_and_reach_each() -> None:
    with pytest.raises(ValueError, match="every state once"):
        Machine("door", Door.SHUT, {Door.SHUT: frozenset({Door.OPEN}), Door.OPEN: frozenset()})
    with pytest.raises(ValueError, match="no move reaches: \\['gone'\\]"):
        Machine("door", Door.SHUT, {Door.SHUT: frozenset({Door.OPEN}), Door.OPEN: frozenset(), Door.GONE: frozenset()})


def test_a_move_the_table_does_not_allow_is_a_conflict() -> None:
    door = Machine(
        "door",
        Door.SHUT,
        {Door.SHUT: frozenset({Door.OPEN}), Door.OPEN: frozenset({Door.SHUT, Door.GONE}), Door.GONE: frozenset()},
    )
    assert door.move("shut", Door.OPEN, "open") == Door.OPEN
    with pytest.raises(Conflict) as e:
        door.move("gone", Door.OPEN, "open")
    assert (e.value.code, e.value.message) == ("invalid_state", "cannot open a door that is gone")
    assert door.final(Door.GONE) and not door.final(Door.OPEN)


@pytest.mark.parametrize(
    ("machine", "initial", "finals"),
    [
        (HOLD, HoldState.ACTIVE, {HoldState.EXPIRED, HoldState.CANCELLED}),
        (INVOICE, InvoiceStatus.DRAFT, {InvoiceStatus.FINAL}),
        (VERIFICATION, Verdict.PENDING, {Verdict.APPROVED, Verdict.REFUSED}),
        (DELIVERY, Delivery.PENDING, {Delivery.DELIVERED, Delivery.FAILED}),
    ],
)
def test_the_declared_machines(machine: Machine[StrEnum], initial: StrEnum, finals: set[StrEnum]) -> None:
    assert machine.initial == initial
    assert {s for s in type(initial) if machine.final(s)} == finals  # an ended hold or a final invoice stays so
    for final in finals:
        with pytest.raises(Conflict):
            machine.move(final.value, initial, "reopen")
