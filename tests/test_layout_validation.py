"""Layout's fast validation path rejects exactly what the per-field checks reject."""

import dataclasses
import enum

import pytest
from budget import examples
from hypothesis import example, given, settings
from hypothesis import strategies as st

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


_ODD_VALUES = st.sampled_from([0, -1, 1, 2, 3, 4, 8, True, False, 2.0, "2", None, (1, 2), [1, 1],
                               (0, 4), (1, -1), frozenset(), {"optimizer"}, frozenset({"bogus"}),
                               frozenset({"parameters", "activations"}), "none", "full", "sgd",
                               "fp8", "fp4", "deepspeed", "vllm", _Degree.EIGHT])


@settings(max_examples=examples(400), deadline=None)
@given(changes=st.dictionaries(st.sampled_from(sorted(f.name for f in dataclasses.fields(Layout))),
                               _ODD_VALUES, min_size=1, max_size=3),
       dp=st.sampled_from([1, 2, 4]), pp=st.sampled_from([1, 2]),
       shard=st.sampled_from([None, 1, 2]))
@example(changes={"dp": 3}, dp=2, pp=1, shard=2)  # dp_shard=2 no longer divides dp
@example(changes={"pp": 1}, dp=1, pp=2, shard=None)  # pipeline_layers (2, 2) no longer fits pp
@example(changes={"dp_shard": 1, "dp": "2"}, dp=1, pp=1, shard=None)  # dp_shard checked first
def test_replace_raises_and_normalizes_exactly_as_the_constructor(changes, dp, pp, shard):
    """`replace` re-checks only the changed fields (and dp_shard with dp, pipeline_layers with
    pp): for any change, good or bad, it must give what `dataclasses.replace` (the full
    constructor) gives: the same Layout, or a SpecError with the same key and message."""
    if shard is not None and dp % shard:
        shard = None
    layout = Layout(dp=dp, pp=pp, dp_shard=shard, pipeline_layers=(2,) * pp, zero_stage=1)
    try:
        slow = dataclasses.replace(layout, **changes)
    except (SpecError, TypeError) as err:
        with pytest.raises(type(err)) as got:
            layout.replace(**changes)
        assert str(got.value) == str(err)
        return
    fast = layout.replace(**changes)
    assert fast == slow and repr(fast) == repr(slow)
    assert type(fast.offload) is frozenset and (fast.pipeline_layers is None
                                                or type(fast.pipeline_layers) is tuple)


def test_buckets_are_deepspeed_sizes_by_known_knob():
    """`Layout.buckets`: (knob, elements >= 0) pairs of BUCKET_KNOBS, DeepSpeed layouts only, kept sorted."""
    import pytest as _pytest

    from planner.errors import SpecError as _SpecError
    from planner.placement.layout import Layout as _Layout
    layout = _Layout(framework="deepspeed", buckets=(("zero3_persistence", 5), ("reduce_bucket", 7)))
    assert layout.buckets == (("reduce_bucket", 7), ("zero3_persistence", 5))
    assert layout.replace(buckets=(("reduce_bucket", 8),)).buckets == (("reduce_bucket", 8),)
    for bad in ((("reduce_buckets", 1),), (("reduce_bucket", -1),), (("reduce_bucket", 1.5),),
                (("reduce_bucket", 1), ("reduce_bucket", 2))):
        with _pytest.raises(_SpecError):
            _Layout(framework="deepspeed", buckets=bad)
    with _pytest.raises(_SpecError, match="DeepSpeed settings"):
        _Layout(framework="megatron", buckets=(("reduce_bucket", 1),))
