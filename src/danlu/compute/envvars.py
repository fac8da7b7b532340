"""A renter's own environment variables (``--env K=V``, ``--env-file``): validated, pure.

They reach only the renter's sandboxed command, never the platform's helpers. Names the
platform sets itself (``DANLU_*``, the GPU visibility variables, ``HOME``) cannot be overridden.
"""

from __future__ import annotations

import re

from danlu.core.errors import InvalidInput

NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,127}$")
RESERVED = frozenset({"CUDA_VISIBLE_DEVICES", "NVIDIA_VISIBLE_DEVICES", "CUDA_DEVICE_ORDER", "HOME"})
MAX_VARS = 128
MAX_BYTES = 64 * 1024


def validate_env(env: object) -> dict[str, str]:
    if env is None:
        return {}
    if not isinstance(env, dict):
        raise InvalidInput("invalid_env", "env is an object of NAME: value strings")
    if len(env) > MAX_VARS:
        raise InvalidInput("invalid_env", f"at most {MAX_VARS} environment variables")
    size = 0
    for key, value in env.items():
        if not isinstance(key, str) or not NAME.fullmatch(key):
            raise InvalidInput(
                "invalid_env", f"{str(key)[:40]!r} is not a variable name (letters, digits, '_', not first a digit)"
            )
        if key.startswith("DANLU_") or key in RESERVED:
            raise InvalidInput("invalid_env", f"{key} is set by the platform and cannot be given with --env")
        if not isinstance(value, str) or "\x00" in value:
            raise InvalidInput("invalid_env", f"the value of {key} must be text without NUL bytes")
        size += len(key.encode()) + len(value.encode())
    if size > MAX_BYTES:
        raise InvalidInput("invalid_env", f"the environment is at most {MAX_BYTES // 1024} KiB in all")
    return dict(env)
