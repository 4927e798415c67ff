"""Layout's fast validation path rejects exactly what the per-field checks reject."""

import enum

import pytest

from planner.errors import SpecError
from planner.placement.layout import Layout


class _Degree(enum.IntEnum):
    EIGHT = 8


@pytest.mark.parametrize("kwargs, key", [
    ({"dp": True}, "dp"), ({"tp": 2.0}, "tp"), ({"pp": 0}, "pp"), ({"seq_len": -1}, "seq_len"),
    ({"micro_batch_size": "2"}, "micro_batch_size"), ({"dp": 4, "dp_shard": 3}, "dp_shard"),
    ({"dp": 4, "dp_shard": True}, "dp_shard"), ({"zero_stage": 4}, "zero_stage"),
    ({"offload": {"gpu"}}, "offload"), ({"pp": 2, "pipeline_layers": (3,)}, "pipeline_layers"),
    ({"pp": 2, "pipeline_layers": (3, -1)}, "pipeline_layers"),
    ({"pp": 2, "pipeline_layers": (3, True)}, "pipeline_layers"),
    ({"pp": 2, "pipeline_layers": (3, 1.0)}, "pipeline_layers"),
])
def test_bad_values_raise_spec_error_naming_the_key(kwargs, key):
    with pytest.raises(SpecError) as err:
        Layout(**kwargs)
    assert err.value.key == key


def test_accepted_values_are_normalised():
    layout = Layout(tp=_Degree.EIGHT, pp=2, pipeline_layers=[5, 0], offload={"optimizer"})
    assert layout.tp == 8 and layout.pipeline_layers == (5, 0) and type(layout.pipeline_layers) is tuple
    assert layout.offload == frozenset({"optimizer"})


def test_replace_equals_dataclasses_replace_and_validates():
    import dataclasses

    layout = Layout(dp=8, tp=8, pp=4, global_batch_size=1024, pipeline_layers=(1, 2, 3, 4))
    for changes in ({"micro_batch_size": 2}, {"pipeline_layers": [4, 3, 2, 1]},
                    {"offload": {"optimizer"}, "zero_stage": 3}):
        fast, slow = layout.replace(**changes), dataclasses.replace(layout, **changes)
        assert fast == slow and hash(fast) == hash(slow) and repr(fast) == repr(slow)
    assert layout.micro_batch_size == 1  # the original is untouched
    with pytest.raises(SpecError) as err:
        layout.replace(pp=0)
    assert err.value.key == "pp"
    with pytest.raises(SpecError):
        layout.replace(pipeline_layers=(1, 2, 3))
    with pytest.raises(TypeError):
        layout.replace(not_a_field=1)
