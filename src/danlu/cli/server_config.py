"""``danlu server --config danlu.toml`` and ``danlu config show`` (issue 28): where each of the
server's settings comes from.

Every flag of ``danlu server`` has a key: its long name without the dashes, dashes as underscores
(``--port`` → ``port``, ``--data-dir`` → ``data_dir``, ``--simulate-gpus`` → ``simulate_gpus``,
``--slurm-gpu-model`` → ``slurm_gpu_model``, a list). A setting comes from, first to last:

1. the command line;
2. the environment, ``DANLU_`` and the key in capitals (``DANLU_PORT=8100``, ``DANLU_DB=…``);
3. the config file (TOML, its top level: ``port = 8100``);
4. the flag's default.

Any key may instead name a file holding its value (``db_file = "/etc/danlu/db-url"``, or
``DANLU_DB_FILE``), read once at start with surrounding whitespace removed: a database password
then appears neither in ``ps`` nor in the config file. A key the server does not know, a value of
the wrong type or a file that cannot be read is an error naming the key, and nothing starts.
``danlu config show`` prints the result with the database URL's password masked.

Pure but for reading the files it is given; the flags themselves are declared once, on ``danlu
server`` (danlu.cli.server_cmd), and read from there."""

from __future__ import annotations

import json
import tomllib
import typing
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import typer

from danlu.core.errors import InvalidInput

ENV_PREFIX = "DANLU_"
FILE_SUFFIX = "_file"
NOT_SETTINGS = ("config", "help")  # options of `danlu server` that are not the server's settings


@dataclass(frozen=True)
class Setting:
    key: str  # as the config file names it: port, data_dir
    name: str  # as danlu server's function and ServerOptions name it: port, data_dir, backend_name
    value: Any
    source: str  # "command line" | "env DANLU_PORT" | "config file" | "default" (+ " (from FILE)")

    @property
    def given(self) -> bool:
        """Read from the environment or the config file (typed here, not by the command line)."""
        return self.source not in ("command line", "default")


# Typer (0.29) carries its own copy of click: its commands, options and contexts, typed loosely here.
Option = Any


def key_of(option: Option) -> str:
    longest: str = max((o for o in option.opts if o.startswith("--")), key=len)
    return longest.removeprefix("--").replace("-", "_")


def settings_of(command: Any) -> dict[str, Option]:
    """The server's settings, by key, as ``command`` declares them."""
    return {
        key_of(p): p
        for p in command.params
        if p.param_type_name == "option" and p.name not in NOT_SETTINGS and any(o.startswith("--") for o in p.opts)
    }


def load(path: Path) -> dict[str, Any]:
    try:
        with open(path, "rb") as f:
            return tomllib.load(f)
    except OSError as exc:
        raise InvalidInput("invalid_config", f"cannot read the config file {path}: {exc.strerror}") from None
    except tomllib.TOMLDecodeError as exc:
        raise InvalidInput("invalid_config", f"{path} is not valid TOML: {exc}") from None


def resolve(
    ctx: typer.Context, table: Mapping[str, Any], environ: Mapping[str, str], hints: Mapping[str, Any]
) -> dict[str, Setting]:
    """Each setting of ``ctx``'s command (``danlu server``) and where it came from; ``hints``: each
    setting's type by its name (ServerOptions' annotations)."""
    options = settings_of(ctx.command)
    known = set(options) | {k + FILE_SUFFIX for k in options}
    unknown = sorted(set(table) - known)
    if unknown:
        raise InvalidInput(
            "invalid_config",
            f"the config file has {', '.join(map(repr, unknown))}, not a setting of danlu server "
            f"(keys are its flags without the dashes, e.g. port, db, data_dir; `danlu config show` lists them)",
        )
    out: dict[str, Setting] = {}
    for key, option in options.items():
        assert option.name is not None
        env, env_file = ENV_PREFIX + key.upper(), ENV_PREFIX + key.upper() + FILE_SUFFIX.upper()
        if getattr(ctx.get_parameter_source(option.name), "name", None) == "COMMANDLINE":
            out[key] = Setting(key, option.name, ctx.params[option.name], "command line")
            continue
        if env in environ:
            raw, source = environ[env], f"env {env}"
        elif env_file in environ:
            raw, source = _read(environ[env_file], env_file), f"env {env_file} (from {environ[env_file]})"
        elif key in table:
            raw, source = table[key], "config file"
        elif key + FILE_SUFFIX in table:
            where = table[key + FILE_SUFFIX]
            if not isinstance(where, str):
                raise InvalidInput("invalid_config", f"{key}{FILE_SUFFIX} is the path of a file, not {where!r}")
            raw, source = _read(where, key + FILE_SUFFIX), f"config file (from {where})"
        else:
            out[key] = Setting(key, option.name, ctx.params[option.name], "default")
            continue
        value = _convert(hints[option.name], key, raw)
        out[key] = Setting(key, option.name, value, source)
    return out


def _read(path: str, key: str) -> str:
    try:
        return Path(path).read_text().strip()
    except OSError as exc:
        raise InvalidInput("invalid_config", f"{key}: cannot read {path}: {exc.strerror}") from None


TRUE, FALSE = ("true", "1", "yes", "on"), ("false", "0", "no", "off")


def _convert(hint: Any, key: str, raw: Any) -> Any:
    """``raw`` (TOML's own types, or an environment string) as the setting's type in ``hint``."""
    base = next((a for a in typing.get_args(hint) if a is not type(None)), hint) if _optional(hint) else hint
    if typing.get_origin(base) is list:
        items = [part.strip() for part in raw.split(",") if part.strip()] if isinstance(raw, str) else raw
        if not isinstance(items, list) or not all(isinstance(i, str) for i in items):
            raise InvalidInput("invalid_config", f'{key} is a list of strings, e.g. {key} = ["a100=A100-80GB"]')
        return items
    if isinstance(raw, (list, dict)):
        raise InvalidInput(
            "invalid_config", f"{key} is one value, not a {'list' if isinstance(raw, list) else 'table'}"
        )
    text = str(raw).strip()
    if base is bool:
        if isinstance(raw, bool) or text.lower() in TRUE + FALSE:
            return raw if isinstance(raw, bool) else text.lower() in TRUE
        raise InvalidInput("invalid_config", f"{key} is true or false, not {raw!r}")
    if base in (int, float) and not isinstance(raw, bool):
        try:
            return int(text) if base is int else float(text)
        except ValueError:
            pass
        raise InvalidInput("invalid_config", f"{key} is {'a whole number' if base is int else 'a number'}, not {raw!r}")
    if base is Path and text:
        return Path(text)
    if base is str and not isinstance(raw, bool):
        return text
    raise InvalidInput("invalid_config", f"{key} cannot be {raw!r}")


def _optional(hint: Any) -> bool:
    return type(None) in typing.get_args(hint)


def shown(setting: Setting) -> Any:
    """The value as ``danlu config show`` prints it: the database URL without its password."""
    value = setting.value
    if setting.key == "db" and value:
        from sqlalchemy.engine import make_url  # here: every CLI command imports this module
        from sqlalchemy.exc import ArgumentError

        try:
            return make_url(str(value)).render_as_string(hide_password=True)
        except ArgumentError:
            return "(not a database URL)"
    return str(value) if isinstance(value, Path) else value


def toml_line(setting: Setting) -> str:
    """``key = value  # source``; a setting with no value is a comment."""
    value = shown(setting)
    if value is None:
        return f"# {setting.key} (not set)  # {setting.source}"
    return f"{setting.key} = {json.dumps(value, ensure_ascii=False)}  # {setting.source}"
