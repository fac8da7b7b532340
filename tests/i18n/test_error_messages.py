"""Every error code the server raises has a 简体中文 sentence (issue 28, finding 12), and the sentence is shown
with the English message beside it."""

from __future__ import annotations

import importlib
import pkgutil
import re
from pathlib import Path

import danlu
from danlu.core.errors import DanluError
from danlu.i18n.errors import localized, texts

SRC = Path(danlu.__file__).resolve().parent


def _raised_codes() -> set[str]:
    """Codes passed as the first argument of a DanluError subclass anywhere in the package."""
    for mod in pkgutil.walk_packages(danlu.__path__, "danlu."):
        if ".migrations" not in mod.name:
            importlib.import_module(mod.name)
    names: set[str] = {DanluError.__name__}
    todo = [DanluError]
    while todo:
        for sub in todo.pop().__subclasses__():
            names.add(sub.__name__)
            todo.append(sub)
    call = re.compile(r"\b(" + "|".join(sorted(names)) + r')\(\s*"([a-z][a-z0-9_]+)"')
    return {m.group(2) for p in SRC.rglob("*.py") for m in call.finditer(p.read_text(encoding="utf-8"))}


def test_every_raised_code_has_a_chinese_sentence_and_none_is_stale() -> None:
    raised, zh = _raised_codes(), texts("zh_CN")
    assert len(raised) > 200  # the scan found the codes (219 when this was written)
    assert sorted(raised - set(zh)) == []
    assert sorted(set(zh) - raised) == []
    assert all(re.search(r"[\u4e00-\u9fff]", v) for v in zh.values())


def test_the_sentence_comes_with_the_english_specifics() -> None:
    msg = "this platform has no V100 GPUs; see `danlu offers`"
    assert localized("model_not_offered", msg, "en") == msg
    zh = localized("model_not_offered", msg, "zh_CN")
    assert zh.startswith("本平台没有这种 GPU") and zh.endswith(f"（{msg}）")
    assert localized("a_code_nobody_raises", msg, "zh_CN") == msg


def test_the_cli_says_it_in_chinese_too() -> None:
    from typer.testing import CliRunner

    from danlu.cli.main import app

    args = ["advise", "--params", "7e9", "--tokens", "1e9", "--gpu", "NOPE-9000"]
    zh = CliRunner().invoke(app, args, env={"DANLU_URL": "", "DANLU_LANG": "zh_CN"})
    assert zh.exit_code != 0
    assert "error [unknown_gpu_model]: 未知的 GPU 型号" in zh.output and "NOPE-9000" in zh.output, zh.output
    en = CliRunner().invoke(app, args, env={"DANLU_URL": "", "DANLU_LANG": "en"})
    assert "error [unknown_gpu_model]: unknown GPU model 'NOPE-9000'" in en.output, en.output


def test_every_event_kind_is_a_word_the_console_translates() -> None:
    from danlu.console.words import EVENT_KINDS
    from danlu.i18n.catalogs import translations
    from danlu.notify.webhooks import KINDS

    assert list(KINDS) == EVENT_KINDS
    zh = translations("zh_CN")
    assert all(re.search(r"[\u4e00-\u9fff]", zh.gettext(k)) for k in KINDS)


def test_the_usage_chart_speaks_the_pages_language() -> None:
    from danlu.i18n.catalogs import translations
    from danlu.telemetry.chart import render_svg

    metrics = {
        "instance_id": "i-1", "since": "2026-01-05T00:00:00+00:00", "until": "2026-01-05T01:00:00+00:00",
        "gpus": [{"gpu_index": 0, "simulated": True, "points": [{"at": "2026-01-05T00:10:00+00:00", "util_pct": 40}]}],
        "run": {"points": [{"at": "2026-01-05T00:10:00+00:00", "util_pct": 20}]},
    }  # fmt: skip
    en = render_svg(metrics)
    assert "utilisation %" in en and "CPU of its cores" in en and "(simulated)" in en and "time (local)" in en
    zh = render_svg(metrics, tr=translations("zh_CN").gettext)
    assert "利用率 %" in zh and "其 CPU 核心" in zh and "GPU 0 (模拟)" in zh and "时间 (本地)" in zh
    assert "utilisation" not in zh and "CPU of its cores" not in zh
