"""The CLI imports OR-Tools only for `plan`: `--help`, `models`, `hardware` start fast."""

import subprocess
import sys

from planner import plan
from planner.search import mesh


def test_help_and_catalog_do_not_import_the_solver():
    code = ("import sys; from typer.testing import CliRunner; from planner.cli import app; "
            "r = CliRunner(); assert r.invoke(app, ['--help']).exit_code == 0; "
            "assert r.invoke(app, ['models']).exit_code == 0; "
            "print(sorted(m for m in sys.modules if m.split('.')[0] in ('ortools', 'pandas')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_fix_keys_named_once():
    """The CLI names the --fix keys from search.mesh; plan accepts the same keys."""
    assert tuple(plan.FIXABLE) == mesh.FIXABLE
