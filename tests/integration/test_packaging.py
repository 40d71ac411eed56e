"""A clean install works: `pip install .` into an empty venv, then the `agentserve` command runs.

The install takes only the image wheelhouse (`--no-index`, no pip configuration), the wheels
requirements.lock resolves to: a dependency that pyproject.toml does not name is then missing from
the venv, and the import checks below fail on it. That keeps the test offline and deterministic.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
WHEELHOUSE = ROOT / "wheelhouse"
# Imports that only an extra brings, by top-level module: the extra that names it.
EXTRAS = {"matplotlib": "bench"}

# Run in the clean venv: every module of the installed package imports, and every third-party
# module the package imports anywhere (also inside functions) is installed. Prints what is missing.
PROBE = """
import ast, importlib, importlib.util, json, pathlib, pkgutil, sys
import agentserve
root = pathlib.Path(agentserve.__file__).parent
extras = set(json.loads(sys.argv[1]))
broken = {}
for mod in pkgutil.walk_packages([str(root)], "agentserve."):
    try:
        importlib.import_module(mod.name)
    except Exception as exc:
        broken[mod.name] = f"{type(exc).__name__}: {exc}"
wanted = set()
for path in root.rglob("*.py"):
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            wanted.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            wanted.add(node.module)
third_party = sorted(
    n for n in wanted
    if n.split(".")[0] not in sys.stdlib_module_names | {"agentserve", "__future__"} | extras
)
missing = []
for name in third_party:
    try:
        found = importlib.util.find_spec(name) is not None
    except ImportError:
        found = False
    if not found:
        missing.append(name)
print(json.dumps({"file": agentserve.__file__, "broken": broken, "missing": missing, "checked": third_party}))
"""


@pytest.fixture(scope="module")
def wheelhouse() -> Path:
    """The image wheelhouse, current with requirements.lock (the script skips the download when it is)."""
    env = {**os.environ, "PYTHON": sys.executable}
    subprocess.run([str(ROOT / "scripts/build_wheelhouse.sh"), "--only", "agentserve"], check=True, env=env)
    return WHEELHOUSE


@pytest.fixture(scope="module")
def clean_venv(tmp_path_factory: pytest.TempPathFactory, wheelhouse: Path) -> Path:
    """A venv without system site-packages holding `pip install .` of this tree, from the wheelhouse only."""
    work = tmp_path_factory.mktemp("packaging")
    # A copy of the sources: building in the tree would leave build/ and *.egg-info behind.
    src = work / "src"
    src.mkdir()
    shutil.copy2(ROOT / "pyproject.toml", src)
    shutil.copytree(ROOT / "services", src / "services", ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
    venv = work / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    # --no-compile: byte-compiling torch's thousands of modules at install is most of the install's
    # time, and the probe imports every agentserve module anyway.
    pip = [str(venv / "bin/python"), "-m", "pip", "install", "--quiet", "--disable-pip-version-check", "--no-compile"]
    subprocess.run(
        [*pip, "--no-index", "--find-links", str(wheelhouse), str(src)],
        check=True,
        env=clean_env(),
        cwd=work,
    )
    return venv


def clean_env(**extra: str) -> dict[str, str]:
    """The environment minus whatever would let the venv see the dev tree or pip find other wheels."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV") and not k.startswith("PIP_")}
    return {**env, "PIP_CONFIG_FILE": os.devnull, **extra}


def run(cmd: list[str], cwd: Path, **env: str) -> str:
    done = subprocess.run(cmd, capture_output=True, text=True, env=clean_env(**env), cwd=cwd, timeout=600)
    assert done.returncode == 0, f"{cmd} exited {done.returncode}:\n{done.stdout}\n{done.stderr}"
    return done.stdout


def test_every_module_imports_and_every_import_is_installed(clean_venv: Path, tmp_path: Path) -> None:
    out = run([str(clean_venv / "bin/python"), "-c", PROBE, json.dumps(sorted(EXTRAS))], tmp_path)
    report = json.loads(out.splitlines()[-1])
    assert Path(report["file"]).is_relative_to(clean_venv), report["file"]  # the installed copy, not the tree
    assert (report["broken"], report["missing"]) == ({}, [])
    assert {"grpc", "torch", "uvloop", "tqdm", "yaml"} <= {n.split(".")[0] for n in report["checked"]}


def test_help_lists_the_commands(clean_venv: Path, tmp_path: Path) -> None:
    out = run([str(clean_venv / "bin/agentserve"), "--help"], tmp_path)
    for command in ("model", "generate", "up", "demo", "bench"):
        assert command in out


def test_generate_matches_the_source_tree(clean_venv: Path, tmp_path: Path) -> None:
    """Each install builds the embedded model from its own package data: the same greedy tokens."""
    # --ignore-eos: the trained default model may end a short completion early.
    args = ["generate", "--prompt", "hi", "--max-tokens", "8", "--ignore-eos", "--json"]
    installed = run([str(clean_venv / "bin/agentserve"), *args], tmp_path, AGENTSERVE_HOME=str(tmp_path / "clean"))
    source = run(
        [sys.executable, "-m", "agentserve.cli.main", *args],
        tmp_path,
        AGENTSERVE_HOME=str(tmp_path / "tree"),
        PYTHONPATH=str(ROOT / "services"),
    )
    result = json.loads(installed)
    assert len(result["token_ids"]) == 8 and result["finish_reason"] == "length"
    assert result == json.loads(source)
