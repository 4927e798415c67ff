"""Record every command-line flag of a serving engine's own argument parser, for
`planner/frameworks/vllm_flags.txt` and `planner/frameworks/sglang_flags.txt` (the recorded copies
`planner check` reads unknown flags against and `serve-plan --emit` writes from).

Usage (in an environment where the engine's Python package imports; no GPU is needed):
    VLLM_TARGET_DEVICE=cpu python tools/record_engine_flags.py vllm > planner/frameworks/vllm_flags.txt
    python tools/record_engine_flags.py sglang > planner/frameworks/sglang_flags.txt
    python tools/record_engine_flags.py sglang-router > planner/frameworks/sglang_router_flags.txt
    python tools/record_engine_flags.py vllm-router > planner/frameworks/vllm_router_flags.txt

It builds the parser exactly as the engine's launcher does and lists its option strings (long and
short forms, `-tp` among them; argparse's BooleanOptionalAction `--no-` forms included); nothing
is served:
- vllm: `vllm.entrypoints.common.cli_args.make_arg_parser` (what `vllm serve` and
  `python -m vllm.entrypoints.openai.api_server` parse: frontend and engine arguments);
- sglang: `sglang.srt.server_args.ServerArgs.add_cli_args` (what `python -m
  sglang.launch_server` parses);
- sglang-router / vllm-router (the prefill/decode routers of disaggregated serving, PyPI packages
  sglang-router and vllm-router): `RouterArgs.add_cli_args(parser, use_router_prefix=False)` on a plain
  argparse parser, as their `launch_router.py` parse_router_args does (what `python -m
  sglang_router.launch_router` and the `vllm-router` console script parse).
The header names the package version and the commit its build recorded.
"""

from __future__ import annotations

import argparse
import importlib
import sys


def _parser(engine: str) -> argparse.ArgumentParser:
    if engine == "vllm":
        from vllm.entrypoints.common.cli_args import make_arg_parser
        from vllm.utils.argparse_utils import FlexibleArgumentParser
        return make_arg_parser(FlexibleArgumentParser())
    if engine == "sglang":
        from sglang.srt.server_args import ServerArgs
        parser = argparse.ArgumentParser()
        ServerArgs.add_cli_args(parser)
        return parser
    if engine in ROUTERS:
        module = importlib.import_module(f"{engine.replace('-', '_')}.router_args")
        parser = argparse.ArgumentParser()
        module.RouterArgs.add_cli_args(parser, use_router_prefix=False)
        return parser
    raise SystemExit(f"engine {engine!r}: allowed vllm, sglang, {', '.join(ROUTERS)}")


ROUTERS = ("sglang-router", "vllm-router")


def _version(engine: str) -> str:
    package = engine.replace("-", "_")
    module = importlib.import_module(f"{package}.version" if engine in ROUTERS else f"{package}._version")
    commit = getattr(module, "__commit_id__", None) or "no commit recorded in the build"
    return f"{module.__version__} ({commit})"


def main() -> None:
    engine = sys.argv[1] if len(sys.argv) > 1 else ""
    parser = _parser(engine)
    flags = sorted(o for o in parser._option_string_actions if o not in ("-h", "--help"))
    print(f"# {engine} {_version(engine)}: every flag of its launch parser")
    print("# (tools/record_engine_flags.py; one a line, sorted)")
    print("\n".join(flags))


if __name__ == "__main__":
    main()
