"""Each training framework's vocabulary: its flag and key names, their defaults, and the planner
knob each one sets -- one table per framework, shared by everything that spells its settings.

- `megatron`: Megatron-LM's launch flags and torchrun's (e.g. the tensor-parallel size flag <-> tp);
- `deepspeed`: DeepSpeed JSON config keys (e.g. the ZeRO section's stage <-> zero_stage);
- `torchtitan`: torchtitan TOML job-config keys (e.g. [parallelism]'s tensor-parallel degree
  <-> tp).

Who reads the tables: the readers of `planner check` (`planner.check.<framework>`), the writers
of `planner plan --emit` (`planner.emit.<framework>`), the gate's single-knob fixes spelled in the
checked file's own terms (`planner.check.gate`), and the placement rules whose fixes name a
framework setting (`planner.placement.rules`). A flag or key name is written here and nowhere else under `planner/`
(tests/test_framework_vocabulary.py enforces it), so a framework renaming one is a one-line change.

Each module cites the framework file and commit its names were read from (`Source:`). The modules
hold data only (names, defaults, value tables) and import nothing from the planner but
`flag_files.recorded_flags`, the reader of the engines' recorded flag lists beside them.
"""

from planner.frameworks import deepspeed, megatron, torchtitan

BY_NAME = {"megatron": megatron, "deepspeed": deepspeed, "torchtitan": torchtitan}
"""`Layout.framework` -> its vocabulary module."""
FIX_TERMS_BY_KIND = {"torchtitan-command": torchtitan.CLI_FIX_TERMS}
"""`Target.kind` -> the fix terms of a file kind whose spelling differs from its framework's
default file (a torchtitan command line, not its TOML)."""
LAUNCH_PINS = {"deepspeed": deepspeed.LAUNCH_PINS}
"""`Layout.framework` -> the layout fields every layout its launch configuration (`plan --emit`)
can run holds; `planner.plan.plan` searches under them where the user pins no other value. None
for Megatron-LM and torchtitan, whose command lines state every degree."""
