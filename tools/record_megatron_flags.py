"""Record every command-line flag Megatron-LM's argument parser defines, for
`planner/frameworks/megatron_flags.txt` (the recorded copy `planner check` reads unknown flags
against).

Usage: python tools/record_megatron_flags.py GIT_DIR [COMMIT] > planner/frameworks/megatron_flags.txt

Reads (never runs) `megatron/training/arguments.py` at COMMIT (default HEAD) of a Megatron-LM git
directory: the names of every `add_argument('--...')`, and for every `ArgumentGroupFactory(Config,
exclude=...)` the flags `megatron/training/argument_utils.py` builds from the dataclass's fields
(`--field-name`; a bool field defaulting to True as `--no-field-name` and `--disable-field-name`;
`argparse_meta` `arg_names` overriding; `init=False` and excluded fields left out), base classes
included; plus `megatron/post_training/arguments.py` `add_modelopt_args` (pretrain_gpt.py's extra
arguments when nvidia-modelopt is installed).
"""

from __future__ import annotations

import ast
import subprocess
import sys


def show(git_dir: str, commit: str, path: str) -> str:
    return subprocess.run(["git", f"--git-dir={git_dir}", "show", f"{commit}:{path}"],
                          capture_output=True, text=True, check=True).stdout


def grep_class(git_dir: str, commit: str, name: str) -> list[str]:
    out = subprocess.run(["git", f"--git-dir={git_dir}", "grep", "-l", f"^class {name}\\b", commit,
                          "--", "megatron"], capture_output=True, text=True).stdout
    return [line.split(":", 1)[1] for line in out.splitlines()]


def add_argument_flags(tree: ast.AST) -> set[str]:
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and getattr(node.func, "attr", "") == "add_argument":
            out |= {a.value for a in node.args if isinstance(a, ast.Constant)
                    and isinstance(a.value, str) and a.value.startswith("--")}
    return out


def _literal_list(node, assigns: dict) -> list[str]:
    if isinstance(node, ast.Name):
        node = assigns.get(node.id)
    try:
        return list(ast.literal_eval(node)) if node is not None else []
    except ValueError:
        return []


def factory_calls(tree: ast.AST) -> list[tuple[str, set[str]]]:
    out = []
    for func in ast.walk(tree):
        if not isinstance(func, ast.FunctionDef):
            continue
        assigns = {t.id: n.value for n in ast.walk(func) if isinstance(n, ast.Assign)
                   for t in n.targets if isinstance(t, ast.Name)}
        for node in ast.walk(func):
            if isinstance(node, ast.Call) and getattr(node.func, "id", "") == "ArgumentGroupFactory":
                exclude = next((k.value for k in node.keywords if k.arg == "exclude"), None)
                out.append((node.args[0].id, set(_literal_list(exclude, assigns))))
    return out


def class_fields(git_dir: str, commit: str, name: str, seen=None) -> list[tuple[str, bool, object, list | None, bool]]:
    """[(field, is_bool, default, arg_names override, init)] of a dataclass and its bases."""
    paths = grep_class(git_dir, commit, name)
    if not paths:
        raise SystemExit(f"class {name} not found")
    tree = ast.parse(show(git_dir, commit, paths[0]))
    cls = next(n for n in ast.walk(tree) if isinstance(n, ast.ClassDef) and n.name == name)
    out = []
    for base in cls.bases:
        base_name = getattr(base, "id", None) or getattr(base, "attr", None)
        if base_name and base_name not in ("object", "ABC"):
            try:
                out += class_fields(git_dir, commit, base_name)
            except SystemExit:
                pass
    for stmt in cls.body:
        if not (isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name)):
            continue
        ann = ast.unparse(stmt.annotation)
        if ann.startswith("ClassVar"):
            continue
        is_bool = ann in ("bool", "Optional[bool]", "bool | None")
        default, names, init = None, None, True
        value = stmt.value
        if isinstance(value, ast.Call) and getattr(value.func, "id", "") == "field":
            for k in value.keywords:
                if k.arg == "default":
                    default = getattr(k.value, "value", None)
                if k.arg == "init":
                    init = getattr(k.value, "value", True)
                if k.arg == "metadata":
                    try:
                        meta = ast.literal_eval(k.value)
                    except ValueError:
                        meta = {}
                    names = meta.get("argparse_meta", {}).get("arg_names")
        elif isinstance(value, ast.Constant):
            default = value.value
        out = [f for f in out if f[0] != stmt.target.id]
        out.append((stmt.target.id, is_bool, default, names, init))
    return out


def factory_flags(git_dir: str, commit: str, name: str, exclude: set[str]) -> set[str]:
    out = set()
    for field, is_bool, default, names, init in class_fields(git_dir, commit, name):
        if field in exclude or not init:
            continue
        dashed = field.replace("_", "-")
        if names:
            out |= set(names)
        elif is_bool and default is True:
            out |= {f"--no-{dashed}", f"--disable-{dashed}"}
        else:
            out.add(f"--{dashed}")
    return out


def main() -> None:
    git_dir = sys.argv[1]
    commit = sys.argv[2] if len(sys.argv) > 2 else "HEAD"
    tree = ast.parse(show(git_dir, commit, "megatron/training/arguments.py"))
    flags = add_argument_flags(tree)
    for name, exclude in factory_calls(tree):
        flags |= factory_flags(git_dir, commit, name, exclude)
    flags |= add_argument_flags(ast.parse(show(git_dir, commit, "megatron/post_training/arguments.py")))
    full = subprocess.run(["git", f"--git-dir={git_dir}", "rev-parse", commit], capture_output=True,
                          text=True, check=True).stdout.strip()
    print(f"# Megatron-LM {full}: every flag of megatron/training/arguments.py's parser")
    print("# (tools/record_megatron_flags.py; one a line, sorted)")
    print("\n".join(sorted(flags)))


if __name__ == "__main__":
    main()
