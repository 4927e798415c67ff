"""Reading spec files: catalog-name resolution and YAML/JSON parsing with one-line errors.

Shared by the model and cluster loaders so that every spec file fails the same way: the message
names the file, the line of a syntax error, and the closest catalog names of an unknown one.
"""

from __future__ import annotations

import difflib
import json
from pathlib import Path

import yaml

from planner.errors import SpecError


def catalog_names(catalog_dir: Path) -> list[str]:
    """Stems of the `*.yaml` files of a catalog folder, sorted."""
    return sorted(p.stem for p in catalog_dir.glob("*.yaml"))


def resolve(ref: str, catalog_dir: Path, kind: str, *, alternatives: str) -> tuple[Path, str]:
    """Turn a catalog name or a path into (file, display name).

    Args:
        ref: catalog name or path to a file.
        catalog_dir: the catalog folder (`models/` or `hardware/`).
        kind: `model` or `cluster` (for messages).
        alternatives: what else the user may pass, e.g. "a YAML file".

    Raises:
        SpecError: missing file, or unknown name with up to three close catalog names.
    """
    path = Path(ref)
    if path.is_file():
        return path, path.stem
    if "/" in ref or ref.endswith((".json", ".yaml", ".yml")):
        raise SpecError("no such file", file=ref)
    catalog = catalog_dir / f"{ref}.yaml"
    if catalog.is_file():
        return catalog, ref
    names = catalog_names(catalog_dir)
    close = difflib.get_close_matches(ref, names, n=3, cutoff=0.4)
    hint = f"did you mean {', '.join(close)}?" if close else f"known {kind}s: {', '.join(names)}"
    raise SpecError(f"unknown {kind} {ref!r}; {hint} (or pass {alternatives})")


def read_mapping(path: Path, what: str) -> dict:
    """Parse a YAML or JSON file whose top level must be a mapping.

    Raises:
        SpecError: syntax error (with line), or a top level that is not a mapping of `what`.
    """
    text = path.read_text(encoding="utf-8")
    try:
        data = json.loads(text) if path.suffix == ".json" else yaml.safe_load(text)
    except json.JSONDecodeError as exc:
        raise SpecError(f"JSON syntax error at line {exc.lineno}: {exc.msg}", file=str(path)) from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "context_mark", None) or getattr(exc, "problem_mark", None)
        line = f" at line {mark.line + 1}" if mark else ""
        problem = getattr(exc, "problem", None) or "invalid YAML"
        raise SpecError(f"YAML syntax error{line}: {problem}", file=str(path)) from None
    if not isinstance(data, dict):
        raise SpecError(f"expected a mapping of {what} at the top level", file=str(path))
    return data
