"""Operator commands for hosts, sandboxes, images and renters' instances and accounts:
``danlu admin hosts|host set|sandboxes|stop|rm|image add|image rm|user suspend|resume|token``."""

from __future__ import annotations

import typer

from danlu.cli.admin_cmds import admin_app, user_app
from danlu.cli.client import Client
from danlu.cli.output import JsonOpt, console, fail, print_json, print_table

host_app = typer.Typer(help="Configure hosts.", no_args_is_help=True)
image_app = typer.Typer(help="Register and remove images.", no_args_is_help=True)
admin_app.add_typer(host_app, name="host")
admin_app.add_typer(image_app, name="image")
ReasonOpt = typer.Option(..., "--reason", help="What the renter is told.")


# Registering copies and checks every file of the image: the deep-learning image (6.5 GB) took 87 s here, past the
# client's usual 60 s, and the command said it failed while the server went on to register it.
IMPORT_TIMEOUT = 3600.0


@admin_app.command("hosts")
def hosts(as_json: bool = JsonOpt) -> None:
    """Hosts: per-GPU limits, network policy, and how runs are sandboxed and limited there."""
    rows = Client().get("/admin/hosts")
    if as_json:
        print_json(rows)
        return
    for r in rows:
        r["per_gpu"] = (
            f"{r['vcpus_per_gpu']} vCPU, {r['memory_per_gpu_mb']} MiB RAM, "
            f"{r['disk_per_gpu_mb']} MiB disk, {r['pids_per_gpu']} processes"
        )
    cols = [("name", "host"), ("gpus", "GPUs"), ("per_gpu", "per GPU"), ("network_policy", "network")]
    cols += [("sandbox", "sandbox"), ("limits_enforced_by", "limits by"), ("identity", "identity")]
    print_table(rows, cols)
    for r in rows:
        console.print(f"{r['name']}: {r['detail']}", markup=False, highlight=False)


@host_app.command("set")
def host_set(
    name: str,
    cpus_per_gpu: float = typer.Option(None, "--cpus-per-gpu", help="vCPUs a rental gets per GPU."),
    mem_per_gpu: str = typer.Option(None, "--mem-per-gpu", help="Memory per GPU, e.g. 16G."),
    disk_per_gpu: str = typer.Option(None, "--disk-per-gpu", help="Workspace disk per GPU, e.g. 100G."),
    pids_per_gpu: int = typer.Option(None, "--pids-per-gpu", help="Processes per GPU."),
    network: str = typer.Option(None, "--network", help="none, outbound or host."),
    as_json: bool = JsonOpt,
) -> None:
    """Change a host's limits or network policy; runs started from now on get them."""
    from danlu.core.errors import DanluError
    from danlu.core.units import parse_mib

    try:
        body = {
            "cpus_per_gpu": cpus_per_gpu,
            "memory_per_gpu_mb": parse_mib(mem_per_gpu, "--mem-per-gpu") if mem_per_gpu else None,
            "disk_per_gpu_mb": parse_mib(disk_per_gpu, "--disk-per-gpu") if disk_per_gpu else None,
            "pids_per_gpu": pids_per_gpu,
            "network_policy": network,
        }
    except DanluError as exc:
        fail(exc.message, exc.code)
    data = Client().put(f"/admin/hosts/{name}", json={k: v for k, v in body.items() if v is not None})
    if as_json:
        print_json(data)
    else:
        console.print(
            f"{data['name']}: {data['vcpus_per_gpu']} vCPU, {data['memory_per_gpu_mb']} MiB RAM, "
            f"{data['disk_per_gpu_mb']} MiB disk, {data['pids_per_gpu']} processes per GPU; "
            f"network {data['network_policy']}"
        )


@admin_app.command("sandboxes")
def sandboxes(as_json: bool = JsonOpt) -> None:
    """Every running sandbox: whose, its uid, limits and network policy."""
    rows = Client().get("/admin/sandboxes")
    if as_json:
        print_json(rows)
        return
    for r in rows:
        lim = r["limits"]
        r["limits_text"] = (
            f"{lim.get('cpus_milli', 0) / 1000:g} vCPU, {lim.get('memory_mb')} MiB, {lim.get('pids')} procs, "
            f"{lim.get('disk_mb')} MiB disk ({lim.get('limits_enforced_by')})"
            if lim
            else "-"
        )
    cols = [("instance_id", "instance"), ("user", "user"), ("job_id", "job"), ("status", "status"), ("uid", "uid")]
    cols += [("image", "image"), ("network", "network"), ("limits_text", "limits")]
    print_table(rows, cols)


@admin_app.command("stop")
def stop(instance_id: str, reason: str = ReasonOpt, as_json: bool = JsonOpt) -> None:
    """Stop any renter's instance (workspace kept); the renter sees REASON."""
    v = Client().post(f"/admin/instances/{instance_id}/stop", json={"reason": reason})
    print_json(v) if as_json else console.print(f"{v['id']} {v['status']}: {v['status_reason']}", markup=False)


@admin_app.command("rm")
def rm(instance_id: str, reason: str = ReasonOpt) -> None:
    """Remove any renter's instance and its workspace; the renter sees REASON."""
    Client().post(f"/admin/instances/{instance_id}/destroy", json={"reason": reason})
    console.print(f"{instance_id} removed")


@user_app.command("suspend")
def suspend(name: str, reason: str = ReasonOpt, as_json: bool = JsonOpt) -> None:
    """Stop everything NAME runs and let nothing new start until `resume`."""
    data = Client().post(f"/admin/users/{name}/suspend", json={"reason": reason})
    print_json(data) if as_json else console.print(f"{name} suspended: {data['suspended_reason']}", markup=False)


@user_app.command("resume")
def resume(name: str, as_json: bool = JsonOpt) -> None:
    data = Client().post(f"/admin/users/{name}/resume")
    print_json(data) if as_json else console.print(f"{name} may rent again")


@user_app.command("token")
def token(
    name: str,
    rotate: bool = typer.Option(False, "--rotate", help="Issue a new token (shown once); the old one stops working."),
    revoke: bool = typer.Option(False, "--revoke", help="The token stops working; no new one."),
    as_json: bool = JsonOpt,
) -> None:
    """Rotate or revoke NAME's API token."""
    if rotate == revoke:
        fail("give exactly one of --rotate or --revoke", "invalid_option")
    data = Client().post(f"/admin/users/{name}/token/{'rotate' if rotate else 'revoke'}")
    if as_json:
        print_json(data)
    elif rotate:
        console.print(f"{name}: new token (shown once): {data['token']}")
    else:
        console.print(f"{name}: token revoked; `danlu admin user token {name} --rotate` issues a new one")


@image_app.command("add")
def image_add(
    name: str,
    source: str = typer.Argument(..., help="A root filesystem folder or tarball on the server's host."),
    description: str = typer.Option("", "--description"),
    as_json: bool = JsonOpt,
) -> None:
    """Register an image renters can choose with `danlu rent --image NAME`."""
    import os

    body = {"name": name, "source": os.path.abspath(source), "description": description}
    if as_json:
        data = Client().post("/admin/images", json=body, timeout=IMPORT_TIMEOUT)
    else:
        with console.status(f"importing {source} as image {name} (checking every file; a large tarball takes a while)"):
            data = Client().post("/admin/images", json=body, timeout=IMPORT_TIMEOUT)
    if as_json:
        print_json(data)
    else:
        console.print(f"image {data['name']} registered ({(data['size_bytes'] or 0) / 2**20:.1f} MiB)")


IMAGE_CACHE = "/var/cache/danlu/images"


@image_app.command("build")
def image_build(
    name: str,
    recipe_file: str = typer.Option(None, "--recipe", help="A recipe TOML (suite, apt, pip, description)."),
    apt: list[str] = typer.Option(None, "--apt", help="A Debian package to install (repeatable)."),
    pip: list[str] = typer.Option(None, "--pip", help="A pip requirement to install, e.g. torch (repeatable)."),
    suite: str = typer.Option("bookworm", "--suite", help="The Debian suite, from this host's apt sources."),
    description: str = typer.Option("", "--description"),
    cache: str = typer.Option(
        IMAGE_CACHE, "--cache", envvar="DANLU_IMAGE_CACHE", help="Built images by recipe hash: built once."
    ),
    as_json: bool = JsonOpt,
) -> None:
    """Build an image from Debian packages (mmdebstrap) plus pip packages, and register it. Run as root
    on the server's host (it registers the tarball from there); what is in it is written into it
    (/etc/danlu-image.json, .packages, .pip) and shown by `danlu images`."""
    import os
    from pathlib import Path

    from danlu.compute import image_build as ib
    from danlu.core.errors import DanluError

    try:
        if recipe_file:
            if apt or pip:
                fail("give --recipe or --apt/--pip, not both", "invalid_option")
            r = ib.load_recipe(Path(recipe_file))
        else:
            r = ib.recipe(suite, apt or [], pip or [], description)
        if os.geteuid() != 0:
            fail("building an image needs root on the server's host (mmdebstrap, then the import)", "not_root")
        label = f"building image {name}: Debian {r.suite}, {len(r.apt_packages)} packages, {len(r.pip)} pip"
        if as_json:
            tar, built = ib.build(r, Path(cache))
        else:
            with console.status(label + " (minutes the first time; cached by recipe)"):
                tar, built = ib.build(r, Path(cache))
    except DanluError as exc:
        fail(exc.message, exc.code)
    body = {"name": name, "source": str(tar), "description": description or r.description}
    data = Client().post("/admin/images", json=body, timeout=IMPORT_TIMEOUT)
    if as_json:
        print_json({**data, "built": built, "tarball": str(tar)})
        return
    how = "built" if built else "from the cache"
    console.print(f"image {data['name']} registered ({(data['size_bytes'] or 0) / 2**20:.1f} MiB, {how}: {tar})")


@image_app.command("rm")
def image_rm(name: str) -> None:
    Client().delete(f"/admin/images/{name}")
    console.print(f"image {name} removed")


def register(app: typer.Typer) -> None:
    """The commands attach to ``danlu admin`` (registered by danlu.cli.admin_cmds)."""
