"""The operator's controls over hosts, sandboxes, renters' instances and accounts."""

from __future__ import annotations

from dataclasses import asdict

from fastapi import APIRouter, Response

from danlu.accounts import service as accounts
from danlu.api.deps import AdminUser, PlatformDep
from danlu.api.paging import ListRoute, paged
from danlu.api.schemas.accounts import ReasonIn, TokenOut, UserOut
from danlu.api.schemas.common import HostNamePath, InstanceIdPath, UserNamePath, errors
from danlu.api.schemas.instances import InstanceOut
from danlu.api.schemas.operator import HostIn, HostOut, SandboxOut
from danlu.compute import hosts, operator

router = APIRouter(route_class=ListRoute, prefix="/admin", tags=["admin"], responses=errors(401, 403))
_NAMED = errors(404)


def _host_out(v: hosts.HostView) -> HostOut:
    d = asdict(v)
    return HostOut(
        **{k: d[k] for k in ("name", "gpus", "pids_per_gpu", "network_policy", "sandbox", "identity", "detail")},
        vcpus_per_gpu=v.cpus_per_gpu,
        memory_per_gpu_mb=v.mem_per_gpu_mb,
        disk_per_gpu_mb=v.disk_per_gpu_mb,
        limits_enforced_by=v.limits_enforced_by,
    )


@router.get("/hosts", response_model=list[HostOut], **paged("name"))
def list_hosts(p: PlatformDep, _admin: AdminUser) -> list[HostOut]:
    """Hosts with their per-GPU limits, network policy and how this host sandboxes and limits runs."""
    return [_host_out(v) for v in hosts.list_hosts(p)]


@router.put("/hosts/{name}", response_model=HostOut, responses=errors(400, 404))
def configure_host(name: HostNamePath, body: HostIn, p: PlatformDep, _admin: AdminUser) -> HostOut:
    """Change per-GPU limits or the network policy (runs started from now on get them)."""
    view = hosts.configure_host(
        p,
        name,
        cpus_per_gpu=body.cpus_per_gpu,
        mem_per_gpu_mb=body.memory_per_gpu_mb,
        disk_per_gpu_mb=body.disk_per_gpu_mb,
        pids_per_gpu=body.pids_per_gpu,
        network_policy=body.network_policy,
    )
    return _host_out(view)


@router.get("/sandboxes", response_model=list[SandboxOut], **paged("instance_id"))
def list_sandboxes(p: PlatformDep, _admin: AdminUser) -> list[SandboxOut]:
    """Every run with a process, whose it is, and what its sandbox was given."""
    return [SandboxOut(**asdict(v)) for v in operator.list_sandboxes(p)]


@router.post("/instances/{instance_id}/stop", response_model=InstanceOut, responses=errors(400, 404, 409, 503))
def stop_instance(instance_id: InstanceIdPath, body: ReasonIn, p: PlatformDep, _admin: AdminUser) -> InstanceOut:
    """Stop any renter's instance; the renter sees the reason. The workspace is kept."""
    return InstanceOut.of(operator.stop_instance(p, instance_id, body.reason))


@router.post("/instances/{instance_id}/destroy", status_code=204, responses=errors(400, 404, 409))
def destroy_instance(instance_id: InstanceIdPath, body: ReasonIn, p: PlatformDep, _admin: AdminUser) -> Response:
    """Remove any renter's instance and its workspace; the renter sees the reason."""
    operator.destroy_instance(p, instance_id, body.reason)
    return Response(status_code=204)


@router.post("/users/{name}/suspend", response_model=UserOut, responses=errors(400, 404))
def suspend(name: UserNamePath, body: ReasonIn, p: PlatformDep, _admin: AdminUser) -> UserOut:
    """Nothing new starts for NAME; their running instances and job runs are stopped now."""
    operator.suspend_user(p, name, body.reason)
    return _user(p, name)


@router.post("/users/{name}/resume", response_model=UserOut, responses=_NAMED)
def resume(name: UserNamePath, p: PlatformDep, _admin: AdminUser) -> UserOut:
    operator.resume_user(p, name)
    return _user(p, name)


@router.post("/users/{name}/token/rotate", response_model=TokenOut, responses=_NAMED)
def rotate(name: UserNamePath, p: PlatformDep, _admin: AdminUser) -> TokenOut:
    """A new token for NAME, shown once; the old one stops working at once."""
    return TokenOut(name=name, token=accounts.rotate_user_token(p, name))


@router.post("/users/{name}/token/revoke", response_model=TokenOut, responses=_NAMED)
def revoke(name: UserNamePath, p: PlatformDep, _admin: AdminUser) -> TokenOut:
    """NAME's token stops working (rotate to issue a new one)."""
    accounts.revoke_user_token(p, name)
    return TokenOut(name=name, token=None)


def _user(p: PlatformDep, name: str) -> UserOut:
    u = accounts.user_info(p, name)
    return UserOut(name=u.name, is_admin=u.is_admin, suspended_reason=u.suspended_reason, sandbox_uid=u.sandbox_uid)
