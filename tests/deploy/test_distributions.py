"""trio-typha and its test bed are two distributions (the product's wheel, which the image
installs, is inspected in test_deploy_image.py): ``trio-typha demo`` finds the test bed through
its entry point when it is installed alongside and says how to get it when it is not.

Both wheels are built from this checkout and installed into a fresh virtualenv whose
site-packages links every third-party package of this one (no index is needed), first
trio-typha alone -- as in the image -- then the test bed beside it.
"""

from __future__ import annotations

import base64
import os
import shutil
import subprocess
import sys
import sysconfig
import zipfile
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.deploy.deploy_render import ROOT

#: Entries of this virtualenv's site-packages that are the project's own installs.
OWN = ("trio_typha", "testbed", "__editable__")
#: The official client, a test dependency only: the fresh virtualenv does without it, as
#: the image does.
TEST_ONLY = ("kubernetes",)


@dataclass(frozen=True)
class Wheels:
    product: Path
    testbed: Path


def build_wheel(source: Path, out: Path) -> Path:
    before = set(out.glob("*.whl"))
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation",
                    "-q", "-w", str(out), str(source)], check=True, timeout=300,
                   capture_output=True)
    [wheel] = set(out.glob("*.whl")) - before
    return wheel


@pytest.fixture(scope="module")
def wheels(tmp_path_factory: pytest.TempPathFactory) -> Wheels:
    out = tmp_path_factory.mktemp("wheels")
    # The test bed is built from a copy: setuptools writes its build tree into the source
    # directory, which for this distribution is the package itself.
    source = tmp_path_factory.mktemp("src") / "testbed"
    shutil.copytree(ROOT / "testbed", source,
                    ignore=shutil.ignore_patterns("build", "*.egg-info", "__pycache__"))
    return Wheels(build_wheel(ROOT, out), build_wheel(source, out))


def names(wheel: Path) -> list[str]:
    with zipfile.ZipFile(wheel) as z:
        return z.namelist()


def metadata(wheel: Path, suffix: str) -> str:
    with zipfile.ZipFile(wheel) as z:
        [name] = [n for n in z.namelist() if n.endswith(f".dist-info/{suffix}")]
        return z.read(name).decode()


class Venv:
    """A virtualenv without pip; third-party packages linked from this one."""

    def __init__(self, path: Path) -> None:
        subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(path)], check=True,
                       timeout=120)
        self.python = path / "bin" / "python"
        site = Path(subprocess.run(
            [str(self.python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
            check=True, capture_output=True, text=True).stdout.strip())
        ours = Path(sysconfig.get_paths()["purelib"])
        for entry in ours.iterdir():
            if entry.name.startswith(OWN + TEST_ONLY) or entry.suffix == ".pth" \
                    or entry.name.startswith("pip"):
                continue
            (site / entry.name).symlink_to(entry)
        self.bin = path / "bin"

    def install(self, wheel: Path) -> None:
        subprocess.run([sys.executable, "-m", "pip", "--python", str(self.python), "install",
                        "-q", "--no-deps", "--no-index", str(wheel)], check=True, timeout=300,
                       capture_output=True)

    def run(self, *args: str) -> subprocess.CompletedProcess[str]:
        # Run from an empty directory: nothing of the checkout is importable by accident.
        env = {k: v for k, v in os.environ.items()
               if k != "PYTHONPATH" and not k.startswith("TYPHA_")}
        return subprocess.run([str(self.bin / "trio-typha"), *args], capture_output=True,
                              text=True, timeout=120, cwd=self.bin.parent, env=env)


@pytest.fixture
def venv(tmp_path: Path, wheels: Wheels) -> Venv:
    """A fresh virtualenv with trio-typha's wheel installed."""
    env = Venv(tmp_path / "env")
    env.install(wheels.product)
    return env


def test_testbed_wheel_is_the_test_bed_with_its_files(wheels: Wheels) -> None:
    files = names(wheels.testbed)
    for needed in ("testbed/demo.py", "testbed/fleet.py", "testbed/apiserver/server.py",
                   "testbed/dashboard/index.html", "testbed/seeds/all-kinds.yaml"):
        assert needed in files
    assert not [n for n in files if n.startswith("trio_typha/")]
    assert "Requires-Dist: trio-typha==0.1.0" in metadata(wheels.testbed, "METADATA")
    points = metadata(wheels.testbed, "entry_points.txt")
    assert "[trio_typha.commands]" in points and "demo = testbed.demo_command:COMMAND" in points


def test_demo_without_the_test_bed_says_how_to_get_it(venv: Venv) -> None:
    """The image's situation: trio-typha alone.  ``serve`` is unaffected; ``demo`` is one
    line naming the distribution to install, and a non-zero exit."""
    assert venv.run("serve", "--help").returncode == 0
    listed = venv.run("--help")
    assert listed.returncode == 0 and "(needs trio-typha-testbed)" in listed.stdout
    done = venv.run("demo", "--size", "tiny")
    assert done.returncode == 2
    assert done.stdout == ""
    lines = done.stderr.splitlines()
    assert len(lines) == 1, done.stderr
    [line] = lines
    assert line == ("trio-typha: demo needs the test bed, which is not installed: pip install "
                    "trio-typha-testbed (in a checkout: pip install ./testbed)")


def test_demo_with_the_test_bed_installed_alongside(venv: Venv, wheels: Wheels) -> None:
    venv.install(wheels.testbed)
    helped = venv.run("demo", "--help")
    assert helped.returncode == 0, helped.stderr
    assert "--kill-replica-at" in helped.stdout and "--grpc-share" in helped.stdout
    # The demo's own option checks run: the command is the test bed's, not a stand-in.
    bad = venv.run("demo", "--agents", "0")
    assert bad.returncode == 2 and "--agents and --processes must be at least 1" in bad.stderr


def test_kubeconfig_is_read_without_the_kubernetes_client(venv: Venv, tmp_path: Path) -> None:
    """In the image's situation (no ``kubernetes`` package), a kubeconfig with a context, a
    token and inline CA data becomes the client config the daemon uses."""
    ca = base64.b64encode(b"-----BEGIN CERTIFICATE-----\n").decode()
    kc = tmp_path / "kubeconfig"
    kc.write_text(
        "apiVersion: v1\nkind: Config\ncurrent-context: main\n"
        f"clusters: [{{name: c, cluster: {{server: 'https://api.example:6443', "
        f"certificate-authority-data: {ca}}}}}]\n"
        "users: [{name: u, user: {token: s3cret}}]\n"
        "contexts: [{name: main, context: {cluster: c, user: u}}]\n")
    code = ("import importlib.util, sys\n"
            "assert importlib.util.find_spec('kubernetes') is None, 'kubernetes is installed'\n"
            "from trio_typha.config_sources import environment_config\n"
            "from trio_typha.datastore.k8s_config import load_kube_client_config\n"
            f"cfg = load_kube_client_config(environment_config({{'KUBECONFIG': {str(kc)!r}}}))\n"
            "print(cfg.server, cfg.authorization, open(cfg.ca_file).read().strip())\n")
    out = subprocess.run([str(venv.python), "-c", code], capture_output=True, text=True,
                         timeout=120, cwd=venv.bin.parent, check=False)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split("\n")[0] == (
        "https://api.example:6443 Bearer s3cret -----BEGIN CERTIFICATE-----")
