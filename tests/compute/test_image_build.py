"""`danlu admin image build` (issue 26, item 2): an image from Debian packages (mmdebstrap) plus pip,
what is in it written into it, cached by recipe, registered and rented like any image.

The build of the small image the test uses (python3-minimal, ~190 MB) takes about a minute the first
time on this machine and is cached (``DANLU_TEST_IMAGE_CACHE``, default /var/cache/danlu/test-images)
by the recipe's hash, so CI builds it once per builder version, not on every run.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from danlu.compute import image_build as ib
from danlu.core.errors import DanluError, InvalidInput
from tests.conftest import LiveServer, wait_for

ROOT = Path(__file__).resolve().parents[2]
CACHE = Path(os.environ.get("DANLU_TEST_IMAGE_CACHE", "/var/cache/danlu/test-images"))
SMALL = ib.recipe(apt=["python3-minimal"], description="the test suite's small image")


@pytest.mark.parametrize(
    ("apt", "pip", "says"),
    [
        (["python3", "vim;rm -rf /"], [], "'vim;rm -rf /' is not a Debian package name"),
        (["../etc"], [], "is not a Debian package name"),
        ([], ["--index-url=http://evil/simple"], "is not a pip requirement"),
        ([], ["torch @ https://evil/x.whl"], "is not a pip requirement"),
        ([], ["-r/etc/shadow"], "is not a pip requirement"),
    ],
)
def test_a_recipe_with_anything_but_package_names_is_refused(apt: list[str], pip: list[str], says: str) -> None:
    with pytest.raises(InvalidInput) as err:
        ib.recipe(apt=apt, pip=pip)
    assert err.value.code == "invalid_recipe" and says in err.value.message


def test_recipes_read_hash_and_turn_into_one_mmdebstrap_command(tmp_path: Path) -> None:
    ok = ib.recipe(apt=["git", "python3"], pip=["jupyterlab>=4,<5", "torch[opt-einsum]", "numpy==2.1.*"])
    assert ok.key() == ib.recipe(apt=["python3", "git"], pip=list(reversed(ok.pip))).key()  # order-free
    assert ok.key() != ib.recipe(apt=["git"], pip=list(ok.pip)).key()
    assert ok.apt_packages[:2] == ("ca-certificates", "python3-pip")  # pip comes with pip packages
    argv = ib.mmdebstrap_argv(ok, tmp_path / "out.tar", tmp_path / "m.json")
    assert argv[:4] == [
        "mmdebstrap",
        "--mode=root",
        "--variant=apt",
        "--include=ca-certificates,python3-pip,git,python3",
    ]
    assert argv[-2:] == ["bookworm", str(tmp_path / "out.tar")]
    assert any("pip install --no-cache-dir --break-system-packages 'jupyterlab>=4,<5'" in a for a in argv)
    # pip trusts what this host's pip trusts (a TLS-inspecting proxy's CA), for that step only
    ca = ib.host_ca()
    assert ca is not None and ca.is_file()
    hooks = [a.removeprefix("--customize-hook=") for a in argv if a.startswith("--customize-hook=")]
    step = next(i for i, h in enumerate(hooks) if "pip install" in h)
    bundle = "$1/etc/ssl/certs/ca-certificates.crt"
    assert hooks[step - 1] == f'cp "{bundle}" "{bundle}.danlu-orig" && cp {ca} "{bundle}"'
    assert hooks[step + 1] == f'mv -f "{bundle}.danlu-orig" "{bundle}"'  # Debian's own again in the image
    shipped = ib.load_recipe(ROOT / "images" / "deep-learning.toml")  # the recipe `make images` builds
    assert {"torch", "jupyterlab", "tensorboard"} <= set(shipped.pip) and "git" in shipped.apt
    (tmp_path / "bad.toml").write_text('apt = ["git"]\nimage = "x"\n')
    with pytest.raises(InvalidInput, match="unknown key 'image'"):
        ib.load_recipe(tmp_path / "bad.toml")


def _builder_or_fail() -> None:
    if shutil.which("mmdebstrap") is None or os.geteuid() != 0:
        msg = "the image builder needs mmdebstrap (Debian package) and root"
        if os.environ.get("CI") == "true":
            pytest.fail(msg + " (CI=true: `make test` installs it)")
        pytest.skip(msg)


def test_an_unknown_debian_package_is_refused_in_a_second_and_nothing_is_built(tmp_path: Path) -> None:
    _builder_or_fail()
    with pytest.raises(DanluError) as err:
        ib.build(ib.recipe(apt=["python3-minimal", "danlu-no-such-package"]), tmp_path)
    assert err.value.code == "unknown_package" and "'danlu-no-such-package'" in err.value.message
    assert list(tmp_path.iterdir()) == []


@pytest.mark.slow(seconds=90)
@pytest.mark.parametrize("db_url", ["sqlite"], indirect=True)  # the builder does not touch the database
def test_a_built_image_says_what_it_holds_and_a_rental_runs_python_in_it(live: LiveServer) -> None:
    _builder_or_fail()
    tar, _ = ib.build(SMALL, CACHE)
    again, built = ib.build(SMALL, CACHE)
    assert (again, built) == (tar, False)  # cached by recipe
    with live.admin() as a, live.new_user("yui") as c:
        r = a.post("/admin/images", json={"name": "py", "source": str(tar), "description": SMALL.description})
        assert r.status_code == 201, r.text
        [img] = [i for i in c.get("/images").json() if i["name"] == "py"]
        held = img["contents"]
        assert (held["suite"], held["apt"], held["pip"]) == ("bookworm", ["python3-minimal"], [])
        assert held["debian_packages"] > 50 and img["size_bytes"] > 50 * 2**20
        cmd = ["sh", "-c", "python3 -c 'import sys; print(\"python\", sys.version_info[0])'; "
               "grep -c . /etc/danlu-image.packages; echo done; sleep 60"]  # fmt: skip
        r = c.post("/instances", json={"gpu_model": "T4", "command": cmd, "image": "py"})
        assert r.status_code == 201, r.text
        iid = r.json()["id"]

        def log() -> str:
            return str(c.get(f"/instances/{iid}/logs").json()["text"])

        # the command's own last line marks that everything before it is in the log
        wait_for(lambda: "done" in log() or c.get(f"/instances/{iid}").json()["status"] != "running", timeout=60)
        assert f"python 3\n{held['debian_packages']}\n" in log(), log()
        c.delete(f"/instances/{iid}")
