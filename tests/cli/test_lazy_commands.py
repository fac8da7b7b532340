"""A command line imports only the command modules its command needs (danlu.cli.main, issue 29): the map of
commands to modules is what registering the modules gives, a command's help is the same as with every module
registered, and `danlu offers` does not import the simulator or the advisor. Judged from the modules a process
imported, not from its time (benchmarks/cli_start.py times it)."""

from __future__ import annotations

import json
import subprocess
import sys

from danlu.cli.main import COMMAND_MODULES, COMMANDS

# Registers the modules one by one into one app and records, for each, the top-level names it added or changed
# (a group's whole tree compared): what COMMANDS must say. In a fresh process: modules add to shared sub-apps.
REBUILD = """
import importlib, json, typer
from danlu.cli.main import COMMAND_MODULES
def tree(t):
    return (sorted(c.name or c.callback.__name__ for c in t.registered_commands),
            sorted((g.name, tree(g.typer_instance)) for g in t.registered_groups))
app, owners = typer.Typer(), {}
for m in COMMAND_MODULES:
    groups = {g.name: tree(g.typer_instance) for g in app.registered_groups}
    commands = {c.name or c.callback.__name__ for c in app.registered_commands}
    importlib.import_module(m).register(app)
    after = {g.name: tree(g.typer_instance) for g in app.registered_groups}
    names = ({c.name or c.callback.__name__ for c in app.registered_commands} - commands) | {
        n for n in after if groups.get(n) != after[n]}
    for n in names:
        owners.setdefault(n, []).append(m.removeprefix("danlu.cli."))
print(json.dumps(owners))
"""

LOADED = """
import sys
from danlu.cli import main
sys.argv = ["danlu", *{argv!r}]
try:
    main.main()
except SystemExit:
    pass
print("LOADED " + " ".join(sorted(m for m in sys.modules if m.startswith("danlu."))))
"""


def _run(code: str) -> str:
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    return r.stdout


def test_the_map_of_commands_is_what_the_modules_register() -> None:
    owners = json.loads(_run(REBUILD))
    assert {k: tuple(v) for k, v in owners.items()} == COMMANDS
    assert {f"danlu.cli.{m}" for mods in COMMANDS.values() for m in mods} == set(COMMAND_MODULES)


def test_a_command_imports_its_own_modules_only_and_helps_as_with_all() -> None:
    out = _run(LOADED.format(argv=["offers", "--help"]))
    loaded = set(out.split("LOADED ")[1].split())
    assert "danlu.cli.account_cmds" in loaded
    for heavy in ("danlu.scheduling.simulator", "danlu.advisor.service", "danlu.cli.instance_cmds"):
        assert heavy not in loaded, heavy
    for argv in (["offers", "--help"], ["admin", "--help"], ["job", "--help"], ["admin", "invoices", "--help"]):
        lazy = _run(LOADED.format(argv=argv)).split("LOADED ")[0]
        full = _run(
            "import sys\nfrom danlu.cli import main\nmain.app\n"
            f"sys.argv = ['danlu', *{argv!r}]\ntry:\n    main.main()\nexcept SystemExit:\n    pass\n"
        )
        assert lazy == full and "Usage: danlu" in lazy, argv
    everything = _run(LOADED.format(argv=["--help"]))
    assert all(f"danlu.cli.{m}" in everything.split("LOADED ")[1] for m in ("server_cmd", "snapshot_cmds"))
