"""A non-editable install (`pip install <repo>`, the README's CI step, pre-commit's `language: python`)
finds the model and cluster catalogs and both calibration files: pyproject.toml ships every data
folder as data-files under `<prefix>/share/planner/`, and `planner.specs.files.data_dir` reads the
clone's folder, else the installed one. A missing catalog or calibration is one line, exit 2."""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest

from planner import serve_validate
from planner.errors import SpecError
from planner.specs import cluster as cluster_spec
from planner.specs import files
from planner.specs import model as model_spec
from tests.cli_run import planner

REPO = Path(__file__).resolve().parents[1]


def test_pyproject_ships_every_data_folder():
    data_files = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]["data-files"]
    for name in files.DATA_DIRS:
        assert data_files[f"share/planner/{name}"] == [f"{name}/*.yaml"], name
        assert list((REPO / name).glob("*.yaml")), name   # the pattern matches the shipped files
    # every top-level folder of YAML data the package reads is one of them
    assert files.data_dir("models") == model_spec.CATALOG_DIR == REPO / "models"
    assert cluster_spec.CATALOG_DIR == REPO / "hardware"


def test_the_installed_folder_is_read_when_the_clone_has_none(tmp_path, monkeypatch):
    installed = tmp_path / "share" / "planner"
    (installed / "models").mkdir(parents=True)
    monkeypatch.setattr(files, "CLONE_ROOT", tmp_path / "site-packages")   # a wheel: no models/ beside the code
    monkeypatch.setattr(files, "INSTALLED_ROOT", installed)
    assert files.data_dir("models") == installed / "models"
    # the clone wins where it has the folder (an editable install)
    (tmp_path / "site-packages" / "models").mkdir(parents=True)
    assert files.data_dir("models") == tmp_path / "site-packages" / "models"


def test_a_missing_serving_calibration_is_bad_input_naming_both_places(tmp_path, monkeypatch):
    monkeypatch.setattr(files, "CLONE_ROOT", tmp_path / "clone")
    monkeypatch.setattr(files, "INSTALLED_ROOT", tmp_path / "share")
    with pytest.raises(SpecError, match=r"calibration/serving.yaml is missing .*clone.*share.*reinstall"):
        serve_validate.load_calibration()
    result = planner("serve-plan", "-m", "llama-3.1-8b", "-c", "dgx-h100", "--gpus", "1",
                     "--input-len", "1000", "--output-len", "100")
    assert result.returncode == 2
    assert "serving.yaml is missing" in result.stderr and "cannot write" not in result.stderr


@pytest.mark.parametrize("command, module", [("models", model_spec), ("hardware", cluster_spec)])
def test_an_empty_catalog_is_an_error_not_an_empty_table(tmp_path, monkeypatch, command, module):
    monkeypatch.setattr(module, "CATALOG_DIR", tmp_path / command)
    result = planner(command)
    assert result.returncode == 2
    assert f"catalog folder {command}/ is missing or empty" in result.stderr
    assert "┃" not in result.stdout
