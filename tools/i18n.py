#!/usr/bin/env python3
"""The console's message catalogs (danlu.console, docs/console.md):

    .venv/bin/python tools/i18n.py          # extract every message to messages.pot and merge it
                                            # into each language's messages.po (translations kept)
    .venv/bin/python tools/i18n.py --check  # exit 1 listing messages a catalog lacks (the tests run this)

Messages are the ``_("…")`` calls of the templates and of src/danlu/console/*.py, and the
``N_("…")`` words of src/danlu/console/words.py. English is the source text; zh_CN translates it.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from babel.messages.catalog import Catalog
from babel.messages.extract import extract_from_dir
from babel.messages.pofile import read_po, write_po

ROOT = Path(__file__).resolve().parent.parent
CONSOLE = ROOT / "src" / "danlu" / "console"
LOCALE = ROOT / "src" / "danlu" / "i18n" / "locale"
LANGS = ("zh_CN",)
METHODS = [("templates/**.html", "jinja2"), ("*.py", "python")]
OPTIONS = {"templates/**.html": {"extensions": ""}}


def extract() -> Catalog:
    pot = Catalog(project="danlu", version="0.1.0", charset="utf-8")
    found = extract_from_dir(
        str(CONSOLE),
        method_map=METHODS,
        options_map=OPTIONS,
        keywords={"_": None, "N_": None, "gettext": None},
        comment_tags=(),
        strip_comment_tags=True,
    )
    # The platform's stored sentences (danlu.i18n.sentences: templates the console translates).
    sentences = extract_from_dir(
        str(ROOT / "src" / "danlu" / "i18n"),
        method_map=[("sentences.py", "python")],
        keywords={"N_": None},
        comment_tags=(),
        strip_comment_tags=True,
    )
    for filename, lineno, message, _comments, _context in [*found, *sentences]:
        if isinstance(message, str) and message:
            pot.add(message, locations=[(filename, lineno)])
    return pot


def po_path(lang: str) -> Path:
    return LOCALE / lang / "LC_MESSAGES" / "messages.po"


def missing(pot: Catalog, lang: str) -> list[str]:
    path = po_path(lang)
    if not path.exists():
        return [m.id for m in pot if m.id]
    with path.open("rb") as f:
        po = read_po(f, locale=lang)
    return [m.id for m in pot if m.id and (po.get(m.id) is None or not po.get(m.id).string)]


def update(pot: Catalog) -> None:
    for lang in LANGS:
        path = po_path(lang)
        path.parent.mkdir(parents=True, exist_ok=True)
        if path.exists():
            with path.open("rb") as f:
                po = read_po(f, locale=lang)
        else:
            po = Catalog(locale=lang, project="danlu", version="0.1.0", charset="utf-8")
        po.update(pot, no_fuzzy_matching=True)
        with path.open("wb") as f:
            write_po(f, po, width=0, omit_header=False, sort_output=True, ignore_obsolete=True, include_lineno=False)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--check", action="store_true", help="list untranslated messages; exit 1 if any")
    args = ap.parse_args()
    pot = extract()
    if args.check:
        bad = {lang: missing(pot, lang) for lang in LANGS}
        for lang, ids in bad.items():
            for mid in ids:
                print(f"{lang}: untranslated: {mid!r}")
        print(f"{len(pot)} messages; " + ", ".join(f"{lang}: {len(ids)} untranslated" for lang, ids in bad.items()))
        return 1 if any(bad.values()) else 0
    update(pot)
    print(f"{len(pot)} messages -> " + ", ".join(str(po_path(lang).relative_to(ROOT)) for lang in LANGS))
    return 0


if __name__ == "__main__":
    sys.exit(main())
