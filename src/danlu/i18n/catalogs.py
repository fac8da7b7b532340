"""Languages: English (the source text) and 简体中文, through gettext catalogs read with Babel.

The catalogs ship as ``.po`` files in the package (``locale/LANG/LC_MESSAGES/messages.po``) and are
compiled in memory on first use, so there is no build step and nothing to fetch. The console's
templates and the CLI's table headers (danlu.cli.output.tr) share them. Money, dates and times are
formatted per locale with Babel (CLDR data that ships inside the babel package), in the deployment's
time zone (``--timezone``).
"""

from __future__ import annotations

import gettext
import io
from datetime import UTC, datetime
from decimal import Decimal, InvalidOperation
from functools import cache
from importlib import resources
from zoneinfo import ZoneInfo

from babel import Locale, UnknownLocaleError
from babel.dates import format_datetime
from babel.messages.mofile import write_mo
from babel.messages.pofile import read_po
from babel.numbers import format_currency, format_decimal
from babel.units import format_unit

LANGUAGES = {"en": "English", "zh_CN": "简体中文"}
DEFAULT = "en"


@cache
def translations(lang: str) -> gettext.NullTranslations:
    """The compiled catalog of ``lang`` (English is the source text: no catalog)."""
    if lang not in LANGUAGES or lang == DEFAULT:
        return gettext.NullTranslations()
    po = resources.files("danlu.i18n").joinpath(f"locale/{lang}/LC_MESSAGES/messages.po")
    with po.open("rb") as f:
        catalog = read_po(f, locale=lang)
    buf = io.BytesIO()
    write_mo(buf, catalog)
    buf.seek(0)
    return gettext.GNUTranslations(buf)


def negotiate(cookie: str | None, accept_language: str | None) -> str:
    """The console's language: the ``lang`` cookie when it names one we have, else the best match of
    the browser's ``Accept-Language`` (zh, zh-CN, zh-Hans → 简体中文), else English."""
    if cookie in LANGUAGES:
        return cookie
    wanted: list[tuple[float, str]] = []
    for part in (accept_language or "")[:500].split(","):
        tag, _, q = part.strip().partition(";q=")
        try:
            weight = float(q) if q else 1.0
        except ValueError:
            continue
        if tag:
            wanted.append((weight, tag.replace("-", "_")))
    wanted.sort(key=lambda w: -w[0])
    found = Locale.negotiate([t for _, t in wanted], ["en", "zh_CN", "zh_Hans_CN", "zh"], sep="_")
    if found is not None and found.language == "zh":
        return "zh_CN"
    return DEFAULT


class Formatter:
    """Money, numbers and times for one language, in the deployment's time zone."""

    def __init__(self, lang: str, timezone: str) -> None:
        self.lang = lang
        self.t = translations(lang)
        try:
            self.locale = Locale.parse(lang)
        except (UnknownLocaleError, ValueError):
            self.locale = Locale.parse(DEFAULT)
        self.tz = ZoneInfo(timezone)

    def gettext(self, message: str) -> str:
        return self.t.gettext(message)

    def money(self, amount: str | None, currency: str) -> str:
        """``amount`` is the API's exact decimal text ("12.30"); formatted without passing through float."""
        if amount is None:
            return "—"
        try:
            value = Decimal(amount)
        except InvalidOperation:
            return amount
        return str(format_currency(value, currency, locale=self.locale, decimal_quantization=False))

    def number(self, value: int | str) -> str:
        return str(format_decimal(Decimal(value), locale=self.locale))

    def mib(self, n_bytes: int) -> str:
        """A size in MiB, one decimal, in the page's number format (a workspace, a snapshot)."""
        return f"{format_decimal(Decimal(n_bytes) / (1 << 20), format='#,##0.0', locale=self.locale)} MiB"

    def when_ms(self, ms: int | None) -> str:
        if ms is None:
            return "—"
        moment = datetime.fromtimestamp(ms / 1000, tz=UTC)
        return str(format_datetime(moment, "medium", tzinfo=self.tz, locale=self.locale))

    def when_iso(self, text: str | None) -> str:
        if not text:
            return "—"
        try:
            moment = datetime.fromisoformat(text.replace("Z", "+00:00"))
        except ValueError:
            return text
        return str(format_datetime(moment, "medium", tzinfo=self.tz, locale=self.locale))

    def duration(self, seconds: int) -> str:
        h, rest = divmod(max(seconds, 0), 3600)
        m, s = divmod(rest, 60)
        return f"{h}:{m:02d}:{s:02d}" if h else f"{m}:{s:02d}"

    def limit(self, seconds: int) -> str:
        """A configured length of time (an idle stop, a longest run) in the largest unit that
        states it exactly: "30 minutes", "30分钟", "90 minutes" — never "30:00", which reads as a
        time of day. :meth:`duration` is for time that has run."""
        seconds = max(seconds, 0)
        for unit, size in (("day", 86400), ("hour", 3600), ("minute", 60)):
            if seconds and seconds % size == 0:
                return str(format_unit(seconds // size, f"duration-{unit}", length="long", locale=self.locale))
        return str(format_unit(seconds, "duration-second", length="long", locale=self.locale))


@cache
def formatter(lang: str, timezone: str) -> Formatter:
    """One shared (read-only) Formatter per language and zone, not one per request."""
    return Formatter(lang, timezone)
