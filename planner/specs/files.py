"""Reading spec files: catalog-name resolution and YAML/JSON parsing with one-line errors.

Shared by the model and cluster loaders so that every spec file fails the same way: the message
names the file, the line of a syntax error, and the closest catalog names of an unknown one.
Anything that is not a small UTF-8 text file holding a mapping with string keys (a binary, a
UTF-16 file, a directory, a device, a FIFO, a symlink loop, an over-long name, a number of more
than 4,300 digits, nesting deeper than the parser's recursion limit, a key given twice) is a
SpecError, never a traceback.
"""

from __future__ import annotations

import difflib
import errno
import json
import os
import stat
import sys
from pathlib import Path

import yaml

from planner.errors import SpecError

MAX_FILE_BYTES = 16 * 2**20
"""Largest spec file read, bytes (16 MiB). A model or cluster config is a few KiB; the bound keeps
a mistaken path (a checkpoint, a log) from being read into memory whole."""


CLONE_ROOT = Path(__file__).resolve().parents[2]
"""The repository root in a clone or an editable install (holds `models/`, `hardware/`, `calibration/`)."""
INSTALLED_ROOT = Path(sys.prefix) / "share" / "planner"
"""Where a (non-editable) wheel installs the same folders: pyproject.toml `[tool.setuptools.data-files]`."""
DATA_DIRS = ("models", "hardware", "calibration")
"""The data folders the package reads; each ships as data-files and is found by `data_dir`."""


def data_dir(name: str) -> Path:
    """The folder `name` (one of `DATA_DIRS`): the clone's, else the installed package's.

    A clone or editable install reads `<repo>/<name>`; `pip install <repo>` (the README's CI step,
    pre-commit's `language: python`) puts the files under `<sys.prefix>/share/planner/<name>`.
    """
    clone = CLONE_ROOT / name
    installed = INSTALLED_ROOT / name
    return clone if clone.is_dir() or not installed.is_dir() else installed


def data_file(name: str, file: str) -> Path:
    """An existing file of the data folder `name`.

    Raises:
        SpecError: the file is in neither the clone nor the installed location (an incomplete install).
    """
    path = data_dir(name) / file
    if not path.is_file():
        raise SpecError(f"planner's data file {name}/{file} is missing (looked in {CLONE_ROOT / name} and "
                        f"{INSTALLED_ROOT / name}); reinstall planner (`pip install` of the repository ships it)")
    return path


def catalog_names(catalog_dir: Path) -> list[str]:
    """Stems of the `*.yaml` files of a catalog folder, sorted.

    Raises:
        SpecError: the folder holds no `*.yaml` (an install without its catalog): never an empty list.
    """
    names = sorted(p.stem for p in catalog_dir.glob("*.yaml"))
    if not names:
        raise SpecError(f"planner's catalog folder {catalog_dir.name}/ is missing or empty (looked in "
                        f"{CLONE_ROOT / catalog_dir.name} and {INSTALLED_ROOT / catalog_dir.name}); "
                        f"reinstall planner (`pip install` of the repository ships it)")
    return names


def resolve(ref: str, catalog_dir: Path, kind: str, *, alternatives: str) -> tuple[Path, str]:
    """Turn a catalog name or a path into (file, display name).

    Args:
        ref: catalog name or path to a file.
        catalog_dir: the catalog folder (`models/` or `hardware/`).
        kind: `model` or `cluster` (for messages).
        alternatives: what else the user may pass, e.g. "a YAML file".

    Raises:
        SpecError: empty name, missing file, a path that is not a readable regular file (directory,
            device, FIFO, symlink loop, name too long), or unknown name with up to three close
            catalog names.
    """
    if not ref.strip():
        raise SpecError(f"empty {kind} name; pass a catalog name or {alternatives}")
    if ref == "-":
        raise SpecError(f"standard input ('-') is not read for a {kind} (only `planner check -` "
                        f"reads its file from it); pass a catalog name or {alternatives} (save the "
                        f"text to a file first)")
    path = Path(ref)
    problem = path_problem(path)
    if problem is None:
        return path, path.stem
    names = catalog_names(catalog_dir)
    looks_like_path = "/" in ref or ref.endswith((".json", ".yaml", ".yml"))
    if ref in names and not looks_like_path:
        return catalog_dir / f"{ref}.yaml", ref
    if looks_like_path or problem != "no such file":
        raise SpecError(problem, file=ref)
    close = difflib.get_close_matches(ref, names, n=3, cutoff=0.4)
    hint = f"did you mean {', '.join(close)}?" if close else f"known {kind}s: {', '.join(names)}"
    raise SpecError(f"unknown {kind} {ref!r}; {hint} (or pass {alternatives})")


def path_problem(path: Path) -> str | None:
    """Why `path` cannot be read as a spec file (one phrase), or None for a regular file."""
    try:
        info = os.stat(path)
    except FileNotFoundError:
        return "no such file"
    except ValueError:
        return "file name contains a NUL byte"
    except OSError as exc:
        if exc.errno == errno.ENAMETOOLONG:
            return "file name too long (the system allows 255 bytes per path component)"
        if exc.errno == errno.ELOOP:
            return "symlink loop (too many levels of symbolic links)"
        return f"cannot open: {exc.strerror}"
    if stat.S_ISDIR(info.st_mode):
        return "is a directory; expected a YAML or JSON file"
    if not stat.S_ISREG(info.st_mode):
        return "not a regular file (a device, FIFO or socket); expected a YAML or JSON file"
    return None


def opens_mapping(text: str) -> bool:
    """Whether the first node of `text`, read as YAML (JSON is YAML), is a mapping, whatever
    follows it: a text that does and then breaks is a YAML / JSON file with a syntax error, not
    another kind of file (a shell script's first node is a plain scalar)."""
    try:
        for event in yaml.parse(text):
            if isinstance(event, yaml.NodeEvent):  # a scalar, sequence or mapping: the first node
                return isinstance(event, yaml.MappingStartEvent)
    except yaml.YAMLError:
        return False
    return False


def read_mapping(path: Path, what: str) -> dict:
    """Parse a YAML or JSON file whose top level must be a mapping with string keys.

    Raises:
        SpecError: unreadable or non-UTF-8 file, syntax error (with line), a key given twice, a
            number too long to convert, nesting too deep, or a top level that is not a mapping of
            `what` with string keys.
    """
    file = str(path)
    text = read_text(path, kind="YAML or JSON file")
    try:
        data = _parse(text, path.suffix)
    except json.JSONDecodeError as exc:
        raise SpecError(f"JSON syntax error at line {exc.lineno}, column {exc.colno}: {exc.msg}",
                        file=file, line=exc.lineno) from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None) or getattr(exc, "context_mark", None)
        line = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = getattr(exc, "problem", None) or "invalid YAML"
        raise SpecError(f"YAML syntax error{line}: {problem}", file=file,
                        line=mark.line + 1 if mark else None) from None
    except _DuplicateKey as exc:
        raise SpecError(f"key given twice{exc.args[1]}; give each key once", file=file, key=exc.args[0]) from None
    except ValueError as exc:  # int() of more than sys.get_int_max_str_digits() digits, a bad date
        if "integer string conversion" in str(exc):
            raise SpecError("number with more than 4,300 digits; numbers in a spec file have at most "
                            "a few dozen", file=file) from None
        raise SpecError(f"invalid value: {str(exc).splitlines()[0]}", file=file) from None
    except RecursionError:
        raise SpecError("nested too deeply to parse; a spec file nests a few levels", file=file) from None
    if not isinstance(data, dict):
        raise SpecError(f"expected a mapping of {what} at the top level", file=file)
    for key in data:
        if not isinstance(key, str):
            shown = "null (~)" if key is None else repr(key)
            raise SpecError(f"key {shown} must be a string (a config key name)", file=file)
    return data


def read_text(path: Path, *, kind: str = "text file") -> str:
    """The UTF-8 text of a spec or config file (at most MAX_FILE_BYTES).

    Args:
        path: the file.
        kind: what the caller expects, for messages ("text file", "YAML or JSON file",
            "TOML file", ...).

    Raises:
        SpecError: a path that is not a readable regular file, a file too large, or not UTF-8.
    """
    file = str(path)
    problem = path_problem(path)
    if problem is not None:
        raise SpecError(problem.replace("a YAML or JSON file", f"a {kind}"), file=file)
    try:
        with open(path, "rb") as handle:
            data = handle.read(MAX_FILE_BYTES + 1)
    except OSError as exc:
        raise SpecError(f"cannot read: {exc.strerror}", file=file) from None
    if len(data) > MAX_FILE_BYTES:
        raise SpecError(f"file larger than {MAX_FILE_BYTES // 2**20} MiB; a spec file is a few KiB",
                        file=file)
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        bom = " (it starts with a UTF-16 byte-order mark; save it as UTF-8)" \
            if data.startswith((b"\xff\xfe", b"\xfe\xff")) else ""
        raise SpecError(f"not UTF-8 text: byte 0x{data[exc.start]:02x} at offset {exc.start}{bom}; "
                        f"expected a UTF-8 {kind}", file=file) from None


class _DuplicateKey(Exception):
    """(key, where) of a mapping key given twice."""


def _parse(text: str, suffix: str) -> object:
    """A `.json` file as JSON; any other text that is a JSON document (a DeepSpeed config on
    standard input or named `.txt`) as JSON too, since YAML 1.1 reads JSON's exponent numbers
    without a dot (`5e8`) as strings; the rest as YAML. A text that opens as JSON does (`{` or `[`)
    and is neither JSON nor YAML (a YAML flow mapping `{a: 1}` is not JSON) raises the JSON error:
    it was meant as JSON, and a YAML parser's message would misname it."""
    if suffix == ".json":
        return _parse_json(text)
    if text.lstrip().startswith(("{", "[")):
        try:
            return _parse_json(text)
        except json.JSONDecodeError as exc:
            try:
                return yaml.load(text, Loader=_UniqueKeyLoader)
            except yaml.YAMLError:
                raise exc from None
    return yaml.load(text, Loader=_UniqueKeyLoader)


def _parse_json(text: str) -> object:
    def pairs(items: list[tuple[str, object]]) -> dict:
        seen: dict = {}
        for key, value in items:
            if key in seen:
                raise _DuplicateKey(key, "")
            seen[key] = value
        return seen
    return json.loads(text, object_pairs_hook=pairs)


class _UniqueKeyLoader(yaml.SafeLoader):
    """yaml.SafeLoader that refuses a mapping key given twice (PyYAML keeps the last silently)."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict:
        seen = set()
        for key_node, _ in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":
                continue
            key = self.construct_object(key_node, deep=deep)
            try:
                duplicate = key in seen
                seen.add(key)
            except TypeError:  # unhashable key: construct_mapping below reports it
                continue
            if duplicate:
                raise _DuplicateKey(str(key), f" (line {key_node.start_mark.line + 1})")
        return super().construct_mapping(node, deep=deep)
