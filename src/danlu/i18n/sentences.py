"""Sentences the platform stores in English — event messages, status and stop reasons, ledger memos, invoice
lines, the built-in image's description — read in the console's language (issue 28, finding 12).

The code that decides a thing writes its sentence in English, once (the API, webhooks, the CLI and the
database keep that). Here each such sentence has a template whose ``{names}`` stand for what varies (ids,
amounts, times, the operator's words); the console matches a stored sentence against the templates and
shows the language's translation of the template (messages.po, through the page's gettext) with the values
carried over. A ``{why}`` (or ``{what}``) is itself a sentence, translated in turn; a ``{state}`` or
``{plan}`` is a word of the catalog. A sentence no template matches is shown as stored, so an unknown one
never disappears. tests/i18n/test_stored_sentences.py checks that what a renter's month stores is all
known. Pure: no I/O.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from functools import cache


def N_(text: str) -> str:
    """Marks a template for tools/i18n.py (extracted into messages.pot like the console's words)."""
    return text


TEMPLATES = [
    # An instance's life (instance events, status reasons, stop reasons).
    N_("{instance}: {why}"),
    N_("created"),
    N_("rented"),
    N_("rented with a copy of {origin}'s workspace"),
    N_("process started"),
    N_("start requested"),
    N_("start requested; resized from {old} to {new}"),
    N_("stop requested by user"),
    N_("destroyed by user"),
    N_("{why}; the process has ended"),
    N_("{why}; last seen alive {when}"),
    N_("command exited with code {code}"),
    N_("process vanished without an exit status"),
    N_("could not start: {error}"),
    N_("account suspended: {reason}"),
    N_("stopped by the operator: {reason}"),
    N_("removed by the operator: {reason}"),
    N_("balance exhausted before the process started"),
    N_("balance exhausted: top up to start again"),
    N_("hard budget cap reached: raise the budget to start again"),
    N_("workspace released at {when} (stopped past the retention period)"),
    N_("the server stopped while starting it"),
    N_("the server stopped before the command started"),
    N_("the server stopped before Slurm was told to start it"),
    N_("Slurm no longer knows its job (purged, or the controller lost its state)"),
    N_("Slurm put its job {job} back in its queue ({reason})"),
    N_("job run"),
    N_("run {n} of job {job}"),
    N_("preempted: {why}"),
    N_("preempted: {why}; notice until {when}"),
    N_("{why}; save a checkpoint and exit by {when} (SIGTERM now; $DANLU_PREEMPT_FILE holds the deadline)"),
    N_("idle: every GPU under {pct} for {seconds} s (mean {mean}, max {max} over {n} samples); stopped at {when}"),
    N_(
        "idle: every GPU under {pct} for {seconds} s; it will be stopped at about {when} unless a GPU is used "
        "(its limit: --idle-stop {limit}s)"
    ),
    N_("maximum duration: ran {ran} s of at most {most} s; stopped at {when}"),
    N_("scheduled {action} ({timetable})"),
    N_("{what} failed: {error}"),
    # Efficiency hints (danlu.telemetry.hints; the event joins them with "; ", in this order).
    N_(
        "over the last {minutes} min the GPU averaged {pct}% while the process kept {cores} of {allotted} CPU cores "
        "busy"
    ),
    N_(
        "over the last {minutes} min the GPUs averaged {pct}% while the process kept {cores} of {allotted} CPU cores "
        "busy"
    ),
    N_("{why} (simulated GPUs: their utilisation is the run's CPU share)"),
    N_(
        "input-bound? {why}: load data in parallel, e.g. DataLoader(num_workers={n}, pin_memory=True, "
        "persistent_workers=True, prefetch_factor=4), and move preprocessing onto the GPU"
    ),
    N_(
        "input-bound? {why}: load data in parallel, e.g. DataLoader(num_workers={n}, pin_memory=True, "
        "persistent_workers=True, prefetch_factor=4), and move preprocessing onto the GPU; {what}"
    ),
    N_(
        "mixed precision: torch.autocast('cuda', dtype=torch.bfloat16) (or fp16 with a GradScaler) halves the bytes "
        "each step moves and uses the tensor cores"
    ),
    N_(
        "mixed precision: torch.autocast('cuda', dtype=torch.bfloat16) (or fp16 with a GradScaler) halves the bytes "
        "each step moves and uses the tensor cores; {what}"
    ),
    N_(
        "a larger batch (or gradient accumulation): it used {used} of {total} GB of GPU memory; fewer, larger steps "
        "spend less time in Python per sample"
    ),
    N_(
        "a larger batch (or gradient accumulation): it used {used} of {total} GB of GPU memory; fewer, larger steps "
        "spend less time in Python per sample; {what}"
    ),
    N_("a larger batch or gradient accumulation: fewer, larger steps spend less time in Python per sample"),
    N_("a larger batch or gradient accumulation: fewer, larger steps spend less time in Python per sample; {what}"),
    N_(
        "a cheaper GPU: at {pct}% this {model} delivered about {delivered} of its {tflops} dense TFLOPS; a {other} "
        "({other_tflops} TFLOPS, {gb} GB) would keep up at {share}% of the price (`danlu offers --gpu {other}`)"
    ),
    # Packages and reservations.
    N_("{term} hold {hold} expired: runs on at the on-demand price"),
    N_("{term} hold {hold} expired: stopped"),
    N_("{term} hold {hold} cancelled early by {user}"),
    N_("hold {hold} ({term}, {count}x {model}) {state} at {when}"),
    # Money events.
    N_(
        "{account}: {money} left (vouchers, balance and credit) runs out at about {when} at the current burn; ask "
        "the operator for a top up (`danlu balance` shows it) or stop something, or running instances stop then"
    ),
    N_("voucher {grant} ({campaign}) has {money} left and expires at {when}; it pays for GPU time before your balance"),
    N_("budget {scope} ({period}) reached {pct}% of its soft limit {money}"),
    N_(
        "{instance} has been stopped since {since}; its workspace will be released at {when} unless you start it "
        "(`danlu start {instance}`) or copy your data out"
    ),
    N_("{instance}'s workspace was released, as warned at {when}"),
    N_(
        "{instance}'s workspace was released, as warned at {when}; snapshot {snapshot} keeps it "
        "(`danlu rent --from {snapshot}`)"
    ),
    N_(
        "snapshot {snapshot} of {instance} will be removed at {when}, at the end of its retention period; rent from "
        "it to keep what you need (`danlu rent --from {snapshot}`)"
    ),
    N_("snapshot {snapshot} of {instance} was removed at the end of its retention period, as warned at {when}"),
    N_(
        "{member} left team {team}; instance {instance} still runs on the team's account until an owner or admin "
        "stops it (`danlu stop {instance}`)"
    ),
    # Ledger memos.
    N_("top-up of {money} for {account}"),
    N_("voucher {campaign} ({money})"),
    N_("voucher {grant} expired unused: {n} minor units"),
    N_("{term} of {count}x {model} ({hold})"),
    N_("refund of {term} hold {hold}"),
    N_("GPU usage of {what}"),
    N_("{what} and {n} more"),
    N_("{instance} ({count}× {model}, {seconds} s, {period})"),
    N_("{instance} ({mib} MiB stored workspace, {seconds} s, {period})"),
    N_("{instance} ({mib} MiB snapshot, {seconds} s, {period})"),
    N_("{first}, {what}"),
    # Invoice lines.
    N_("{count} x {model} {plan}, instance {instance}"),
    N_("{mib} MiB stored workspace (price per GB-month), instance {instance}"),
    N_("{mib} MiB snapshot (price per GB-month), instance {instance}"),
    N_("adjustment for {period}: {why}"),
    N_("{term} ({label}) of {count} x {model}, hold {hold}, {start} to {end}"),
    N_("refund of {term} hold {hold}, cancelled by {user} at {when} after {seconds} s: unused {unused} less fee {fee}"),
    N_(
        "refund of {term} hold {hold}, cancelled by {user} at {when} after {seconds} s: unused {unused} less discount "
        "clawed back {fee}"
    ),
    # The built-in image.
    N_("this host's own /usr, /etc, /bin … read-only (whatever the operator installed)"),
]
# Words a stored sentence carries that the catalog translates (hold states, plans, a schedule's action, terms).
WORDS = [
    N_("expired"),
    N_("cancelled"),
    N_("on-demand"),
    N_("held"),
    N_("stop"),
    N_("start"),
    N_("1 day"),
    N_("1 week"),
    N_("1 month"),
]
_SENTENCE_SLOTS = {"why", "what", "first"}  # another sentence, translated in turn
_WORD_SLOTS = {"state", "plan", "action", "label"}  # a catalog word
_SLOT = re.compile(r"\{(\w+)\}")
# What a slot may hold, where "anything" would let a short template swallow a longer sentence's start.
_SHAPES = {
    "instance": r"[ij]-[0-9a-z]+",
    "hold": r"h-[0-9a-z]+",
    "snapshot": r"s-[0-9a-f]+",
    "n": r"[0-9]+",
    "count": r"[0-9]+",
    "code": r"-?[0-9]+",
    "seconds": r"[0-9]+(?:\.[0-9]+)?",
    "first": r"[ij]-[0-9a-z]+ \([^()]*\)",  # one instance's part of a usage memo
    "period": r"[^()]+",
    "model": r"[^(),]+",
}


@cache
def _compiled() -> list[tuple[str, re.Pattern[str]]]:
    """Each template as a pattern: wrappers first, then the most literal text first (a specific sentence
    before a general one)."""
    out = []
    for template in TEMPLATES:
        parts, seen, pos = [], set(), 0
        for m in _SLOT.finditer(template):
            parts.append(re.escape(template[pos : m.start()]))
            name = m.group(1)
            if name in seen:
                parts.append(f"(?P={name})")
            else:
                seen.add(name)
                shape = _SHAPES.get(name, ".+" if name in _SENTENCE_SLOTS else ".+?")
                parts.append(f"(?P<{name}>{shape})")
            pos = m.end()
        parts.append(re.escape(template[pos:]))
        out.append((template, re.compile("".join(parts), re.DOTALL)))
    return sorted(out, key=lambda tp: (not _wraps(tp[0]), -len(_SLOT.sub("", tp[0]))))


def _wraps(template: str) -> bool:
    """Whether ``template`` wraps another sentence (``{why}; the process has ended``): such are tried first, so
    a sentence's free text (an operator's reason) never swallows what a wrapper added after it."""
    return any(name in _SENTENCE_SLOTS for name in _SLOT.findall(template))


def translate(text: str, gettext: Callable[[str], str], _depth: int = 0) -> str:
    """``text`` in the language of ``gettext``: its template's translation with its values, or ``text``."""
    if not text or _depth > 6:
        return text
    for template, pattern in _compiled():
        m = pattern.fullmatch(text)
        if m is None:
            continue
        values = {}
        for name, value in m.groupdict().items():
            if name in _SENTENCE_SLOTS:
                value = translate(value, gettext, _depth + 1)
            elif name in _WORD_SLOTS:
                value = _word(value, gettext)
            values[name] = value
        translated = gettext(template)
        try:
            return translated.format(**values)
        except (KeyError, IndexError, ValueError):  # a translation that lost a slot: the English, not a crash
            return text
    return text


def _word(value: str, gettext: Callable[[str], str]) -> str:
    return gettext(value) if value in WORDS else value
