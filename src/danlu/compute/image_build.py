"""Building an image from Debian and pip packages (issue 26, item 2): ``danlu admin image build``.

No container engine is needed (none runs on these hosts): ``mmdebstrap`` (the Debian package of that
name) makes a Debian root filesystem from the host's apt sources as a tarball, ``pip`` installs into
it in a customize hook, and the result is registered like any tarball (danlu.compute.images.register:
copied under the sandbox folder, owned by root, bound read-only into sandboxes). What is in it is
written into the image itself, so a renter reads it where they run and ``danlu images`` shows it:

* ``/etc/danlu-image.json``: the recipe (suite, apt and pip packages asked for) and the builder;
* ``/etc/danlu-image.packages``: every Debian package installed, ``name<TAB>version``;
* ``/etc/danlu-image.pip``: ``pip freeze`` of what pip installed (when the recipe has pip packages).

A recipe is a small TOML file (``images/deep-learning.toml``) or the same given as options. Package
names are checked before anything runs (no pip options such as ``--index-url``, no shell words). A
build is cached by the recipe's hash (``key``) in a folder of tarballs, so the test suite and a
second ``make images`` do not build again when nothing changed.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shlex
import shutil
import subprocess
import tomllib
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

from danlu.core.errors import DanluError, InvalidInput

BUILDER = "danlu-image-build/1"  # a change here (or in the hooks) builds every cached recipe again
APT_NAME = re.compile(r"^[a-z0-9][a-z0-9+.-]{0,99}$")
# a requirement: a project name, optional extras and version constraints; never an option or a URL
PIP_REQUIREMENT = re.compile(
    r"^[A-Za-z0-9][A-Za-z0-9._-]{0,99}(\[[A-Za-z0-9._,-]{1,100}\])?"  # name[extras]
    r"([<>=!~]=?[A-Za-z0-9.*+!-]{1,50}(,[<>=!~]=?[A-Za-z0-9.*+!-]{1,50}){0,4})?$"  # >=4,<5
)
SUITE = re.compile(r"^[a-z]{2,20}$")
BASE_PACKAGES = ("ca-certificates",)


class ImageBuildFailed(DanluError):
    http_status = 422


@dataclass(frozen=True)
class Recipe:
    suite: str = "bookworm"
    apt: tuple[str, ...] = ()
    pip: tuple[str, ...] = ()
    description: str = ""

    def key(self) -> str:
        """The cache key: the recipe's content and the builder's version."""
        text = json.dumps([BUILDER, self.suite, sorted(self.apt), sorted(self.pip)])
        return hashlib.sha256(text.encode()).hexdigest()[:32]

    @property
    def apt_packages(self) -> tuple[str, ...]:
        """What apt installs: the recipe's packages, the base set, and pip itself when pip packages are asked."""
        extra = ("python3-pip",) if self.pip else ()
        return tuple(dict.fromkeys((*BASE_PACKAGES, *extra, *self.apt)))


def recipe(suite: str = "bookworm", apt: Sequence[str] = (), pip: Sequence[str] = (), description: str = "") -> Recipe:
    """A checked recipe: every name is a plain package name (a clear error naming the first that is not)."""
    if not SUITE.fullmatch(suite):
        raise InvalidInput("invalid_recipe", f"suite {suite!r} is not a Debian suite name such as bookworm")
    for name in apt:
        if not APT_NAME.fullmatch(name):
            raise InvalidInput("invalid_recipe", f"{name!r} is not a Debian package name (a-z, 0-9, + . -)")
    for req in pip:
        if not PIP_REQUIREMENT.fullmatch(req):
            raise InvalidInput(
                "invalid_recipe",
                f"{req!r} is not a pip requirement such as torch or jupyterlab>=4 (no options, no URLs)",
            )
    if len(description) > 500:
        raise InvalidInput("invalid_description", "an image description is at most 500 characters")
    return Recipe(suite, tuple(apt), tuple(pip), description)


def load_recipe(path: Path) -> Recipe:
    try:
        raw = tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        raise InvalidInput("invalid_recipe", f"cannot read recipe {path}: {exc}") from None
    unknown = sorted(set(raw) - {"suite", "apt", "pip", "description"})
    if unknown:
        raise InvalidInput("invalid_recipe", f"{path}: unknown key {unknown[0]!r} (suite, apt, pip, description)")
    lists = {k: raw.get(k, []) for k in ("apt", "pip")}
    if not all(isinstance(v, list) and all(isinstance(x, str) for x in v) for v in lists.values()):
        raise InvalidInput("invalid_recipe", f"{path}: apt and pip are lists of package names")
    return recipe(str(raw.get("suite", "bookworm")), lists["apt"], lists["pip"], str(raw.get("description", "")))


def unknown_packages(names: Sequence[str]) -> list[str]:
    """The names this host's apt lists do not know (one ``apt-cache policy``: a known package gets a
    ``name:`` line), checked in a second before a build that would fail after a minute; none when
    the lists are missing (nothing to judge by)."""
    if shutil.which("apt-cache") is None:
        return []
    asked = [BASE_PACKAGES[0], *names]
    done = subprocess.run(["apt-cache", "policy", "--", *asked], capture_output=True, text=True)
    known = {line[:-1] for line in done.stdout.splitlines() if line.endswith(":") and not line[:1].isspace()}
    if BASE_PACKAGES[0] not in known:
        return []
    return [n for n in names if n not in known]


BUNDLE = "/etc/ssl/certs/ca-certificates.crt"


def host_ca() -> Path | None:
    """The certificates this host's pip trusts (``PIP_CERT``, else the system bundle, which holds the CAs an
    operator added under /usr/local/share/ca-certificates, e.g. a TLS-inspecting proxy's): the image's pip
    step trusts the same, or behind such a proxy no pip package could be fetched (``CERTIFICATE_VERIFY_FAILED``)."""
    for candidate in (os.environ.get("PIP_CERT"), "/etc/ssl/certs/ca-certificates.crt"):
        if candidate and Path(candidate).is_file():
            return Path(candidate)
    return None


def mmdebstrap_argv(r: Recipe, out: Path, manifest: Path) -> list[str]:
    """The build as one mmdebstrap command: the packages, pip in a hook, what is in it written last."""
    hooks = []
    if r.pip:
        pip = " ".join(shlex.quote(x) for x in r.pip)
        ca = host_ca()
        if ca is not None:  # for this step only: the image keeps Debian's own bundle
            hooks.append(f'cp "$1{BUNDLE}" "$1{BUNDLE}.danlu-orig" && cp {shlex.quote(str(ca))} "$1{BUNDLE}"')
        hooks.append(f'chroot "$1" python3 -m pip install --no-cache-dir --break-system-packages {pip}')
        if ca is not None:
            hooks.append(f'mv -f "$1{BUNDLE}.danlu-orig" "$1{BUNDLE}"')
        hooks.append('chroot "$1" python3 -m pip freeze > "$1/etc/danlu-image.pip"')
    hooks.append('chroot "$1" dpkg-query -W -f \'${Package}\\t${Version}\\n\' > "$1/etc/danlu-image.packages"')
    hooks.append(f'cp {shlex.quote(str(manifest))} "$1/etc/danlu-image.json"')
    hooks.append('chmod 644 "$1"/etc/danlu-image.*')
    argv = ["mmdebstrap", "--mode=root", "--variant=apt", "--include=" + ",".join(r.apt_packages)]
    argv += [f"--customize-hook={h}" for h in hooks]
    return [*argv, r.suite, str(out)]


def build(r: Recipe, cache: Path, *, log_to: Path | None = None) -> tuple[Path, bool]:
    """The image tarball for ``r`` from ``cache`` (``<key>.tar``) or built now; (path, built now).
    A failed build leaves nothing in the cache and raises ``image_build_failed`` with the log's tail."""
    cache.mkdir(parents=True, exist_ok=True, mode=0o700)
    out = cache / f"{r.key()}.tar"
    if out.is_file():
        return out, False
    if shutil.which("mmdebstrap") is None:
        raise ImageBuildFailed(
            "image_builder_missing",
            "mmdebstrap is not installed (Debian package mmdebstrap; `make images` installs it)",
        )
    missing = unknown_packages(r.apt)
    if missing:
        raise InvalidInput(
            "unknown_package",
            f"no Debian package {missing[0]!r} in this host's apt sources (`apt-cache search` finds names); "
            "nothing built",
        )
    log = log_to or cache / f"{r.key()}.log"
    manifest = cache / f"{r.key()}.json"
    manifest.write_text(json.dumps({"builder": BUILDER, **asdict(r)}, indent=1), encoding="utf-8")
    partial = cache / f"{r.key()}.partial.tar"
    try:
        with log.open("w", encoding="utf-8") as handle:
            done = subprocess.run(
                mmdebstrap_argv(r, partial, manifest), stdout=handle, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL
            )
        if done.returncode != 0:
            tail = log.read_text(encoding="utf-8", errors="replace").strip().splitlines()[-8:]
            raise ImageBuildFailed(
                "image_build_failed",
                f"mmdebstrap failed (exit {done.returncode}); nothing registered. The log ({log}) ends:\n"
                + "\n".join(tail),
            )
        partial.rename(out)
    finally:
        partial.unlink(missing_ok=True)
        manifest.unlink(missing_ok=True)
    return out, True


def contents(root: Path) -> dict[str, object] | None:
    """What an image built here says it holds (None for one imported from elsewhere)."""
    try:
        meta = json.loads((root / "etc" / "danlu-image.json").read_text(encoding="utf-8"))
        packages = (root / "etc" / "danlu-image.packages").read_text(encoding="utf-8").splitlines()
    except (OSError, ValueError):
        return None
    pip_file = root / "etc" / "danlu-image.pip"
    pip = pip_file.read_text(encoding="utf-8").split() if pip_file.is_file() else []
    return {
        "suite": meta.get("suite"),
        "apt": meta.get("apt", []),
        "pip": meta.get("pip", []),
        "debian_packages": len(packages),
        "pip_installed": pip,
    }
