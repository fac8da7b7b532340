"""Words the templates translate from data (statuses, roles, kinds): listed here so that the catalog
extraction (tools/i18n.py) finds them. ``N_`` marks a message without translating it."""

from __future__ import annotations


def N_(message: str) -> str:
    return message


STATUSES = [
    N_("pending"), N_("running"), N_("stopping"), N_("stopped"), N_("exited"), N_("lost"), N_("failed"),
    N_("destroyed"), N_("queued"), N_("succeeded"), N_("cancelled"),
]  # fmt: skip
OTHER = [
    N_("owner"), N_("admin"), N_("member"), N_("viewer"),  # team roles
    N_("usage"), N_("topup"), N_("voucher"), N_("refund"), N_("charge"), N_("adjustment"),  # ledger kinds
    N_("active"), N_("spent"), N_("expired"), N_("draft"), N_("final"),  # voucher and invoice states
    N_("train"), N_("finetune"), N_("inference"),  # advisor tasks
]  # fmt: skip
# The services' messages most often met in the console (the rest are shown in English).
MESSAGES = [
    N_("the user name or the password is wrong; try again or ask your operator"),
    N_("there is no such page"),
    N_("there is no such instance or job here"),
]
