"""The operator's controls over hosts, sandboxes, renters' instances and accounts."""

from __future__ import annotations

from dataclasses import asdict

from fastapi import APIRouter, Response

from danlu.accounts.service import revoke_token, rotate_token
from danlu.api.deps import AdminUser, PlatformDep
from danlu.api.schemas import HostIn, HostOut, InstanceOut, ReasonIn, SandboxOut, TokenOut, UserOut
from danlu.compute import hosts, operator
from danlu.core.errors import InvalidInput

router = APIRouter(prefix="/admin", tags=["admin"])


def _host_out(v: hosts.HostView) -> HostOut:
    d = asdict(v)
    return HostOut(
        **{k: d[k] for k in ("name", "gpus", "pids_per_gpu", "network_policy", "sandbox", "identity", "detail")},
        vcpus_per_gpu=v.cpus_per_gpu,
        memory_per_gpu_mb=v.mem_per_gpu_mb,
        disk_per_gpu_mb=v.disk_per_gpu_mb,
        limits_enforced_by=v.limits_enforced_by,
    )


@router.get("/hosts", response_model=list[HostOut])
def list_hosts(p: PlatformDep, _admin: AdminUser) -> list[HostOut]:
    """Hosts with their per-GPU limits, network policy and how this host sandboxes and limits runs."""
    return [_host_out(v) for v in hosts.list_hosts(p)]


@router.put("/hosts/{name}", response_model=HostOut)
def configure_host(name: str, body: HostIn, p: PlatformDep, _admin: AdminUser) -> HostOut:
    """Change per-GPU limits or the network policy (runs started from now on get them)."""
    milli = None
    if body.cpus_per_gpu is not None:
        if not 0 < body.cpus_per_gpu < 1e6:
            raise InvalidInput("invalid_host_limit", "vCPUs per GPU is between 0.1 and 1000")
        milli = round(body.cpus_per_gpu * 1000)
    with p.db.write() as s:
        host = hosts.get_host(s, name)
        hosts.configure(
            p,
            s,
            host,
            cpus_per_gpu_milli=milli,
            mem_per_gpu_mb=body.memory_per_gpu_mb,
            disk_per_gpu_mb=body.disk_per_gpu_mb,
            pids_per_gpu=body.pids_per_gpu,
            network_policy=body.network_policy,
        )
    return next(_host_out(v) for v in hosts.list_hosts(p) if v.name == name)


@router.get("/sandboxes", response_model=list[SandboxOut])
def list_sandboxes(p: PlatformDep, _admin: AdminUser) -> list[SandboxOut]:
    """Every run with a process, whose it is, and what its sandbox was given."""
    return [SandboxOut(**asdict(v)) for v in operator.list_sandboxes(p)]


@router.post("/instances/{instance_id}/stop", response_model=InstanceOut)
def stop_instance(instance_id: str, body: ReasonIn, p: PlatformDep, _admin: AdminUser) -> InstanceOut:
    """Stop any renter's instance; the renter sees the reason. The workspace is kept."""
    return InstanceOut.of(operator.stop_instance(p, instance_id, body.reason))


@router.post("/instances/{instance_id}/destroy", status_code=204)
def destroy_instance(instance_id: str, body: ReasonIn, p: PlatformDep, _admin: AdminUser) -> Response:
    """Remove any renter's instance and its workspace; the renter sees the reason."""
    operator.destroy_instance(p, instance_id, body.reason)
    return Response(status_code=204)


@router.post("/users/{name}/suspend", response_model=UserOut)
def suspend(name: str, body: ReasonIn, p: PlatformDep, _admin: AdminUser) -> UserOut:
    """Nothing new starts for NAME; their running instances and job runs are stopped now."""
    operator.suspend_user(p, name, body.reason)
    return _user(p, name)


@router.post("/users/{name}/resume", response_model=UserOut)
def resume(name: str, p: PlatformDep, _admin: AdminUser) -> UserOut:
    operator.resume_user(p, name)
    return _user(p, name)


@router.post("/users/{name}/token/rotate", response_model=TokenOut)
def rotate(name: str, p: PlatformDep, _admin: AdminUser) -> TokenOut:
    """A new token for NAME, shown once; the old one stops working at once."""
    with p.db.write() as s:
        return TokenOut(name=name, token=rotate_token(s, name))


@router.post("/users/{name}/token/revoke", response_model=TokenOut)
def revoke(name: str, p: PlatformDep, _admin: AdminUser) -> TokenOut:
    """NAME's token stops working (rotate to issue a new one)."""
    with p.db.write() as s:
        revoke_token(s, name)
    return TokenOut(name=name, token=None)


def _user(p: PlatformDep, name: str) -> UserOut:
    from danlu.accounts.service import get_user_by_name

    with p.db.read() as s:
        u = get_user_by_name(s, name)
        return UserOut(name=u.name, is_admin=u.is_admin, suspended_reason=u.suspended_reason, sandbox_uid=u.sandbox_uid)
