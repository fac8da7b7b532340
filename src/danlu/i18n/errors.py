"""Error messages in the user's language (issue 28, finding 12): the server's errors carry a stable code and
an English message with the specifics (names, numbers, the command to run). For a language other than
English, ``locale/LANG/errors.toml`` gives one sentence per code — what went wrong and what to do — and
:func:`localized` shows it with the English message beside it, so nothing specific is lost. The console
uses it; the API keeps English (programs read the code)."""

from __future__ import annotations

import tomllib
from functools import cache
from importlib import resources

from danlu.i18n.catalogs import DEFAULT, LANGUAGES


@cache
def texts(lang: str) -> dict[str, str]:
    """Code → sentence for ``lang`` (English: none, the messages are English)."""
    if lang not in LANGUAGES or lang == DEFAULT:
        return {}
    path = resources.files("danlu.i18n").joinpath(f"locale/{lang}/errors.toml")
    if not path.is_file():
        return {}
    with path.open("rb") as f:
        return {str(k): str(v) for k, v in tomllib.load(f).items()}


def localized(code: str, message: str, lang: str) -> str:
    """The message a person reading ``lang`` sees: the code's sentence with the English message beside it,
    or the English message where the language has no sentence for the code."""
    text = texts(lang).get(code)
    if not text or not message:
        return text or message
    return f"{text}（{message}）"
