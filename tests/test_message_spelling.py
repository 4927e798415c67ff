"""Messages echo values as the YAML / JSON file spells them and count in words (review-fresh5 #12):
`true` not `True`, `null` not `None`, `[20, 21]` not a Python tuple, whole byte counts without an exponent,
`1 GPU` / `1 node`, not `1 GPUs` / `1 node(s)`."""

from __future__ import annotations

import json
import pytest
import yaml

from planner.errors import SpecError, counted, number, shown
from planner.specs.cluster import load_cluster, to_dict
from planner.specs.model import load_model


@pytest.mark.parametrize("value, text", [(True, "true"), (False, "false"), (None, "null"), ((20, 21, 0), "[20, 21, 0]"),
                                         ([1, [2, None]], "[1, [2, null]]"), ("abc", "'abc'"), (4096, "4096")])
def test_shown_spells_values_as_the_file_does(value, text):
    assert shown(value) == text


def test_counts_and_numbers_in_words():
    assert [counted(1, "GPU"), counted(8, "GPU"), counted(1024, "sequence")] == ["1 GPU", "8 GPUs", "1,024 sequences"]
    # 40 GiB = 40 x 2**30 = 42,949,672,960 bytes; 1e6 requests/s
    assert number(40 * 2**30 * 1.0) == "42,949,672,960" and number(1e6) == "1,000,000" and number(0.25) == "0.25"


def test_json_true_for_an_integer_key_is_echoed_as_true(tmp_path):
    config = {"model_type": "llama", "hidden_act": "silu", "hidden_size": 1024, "num_hidden_layers": True,
              "num_attention_heads": 8, "num_key_value_heads": 8, "intermediate_size": 2816, "vocab_size": 32000,
              "max_position_embeddings": 4096}
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config))
    with pytest.raises(SpecError, match=r"num_hidden_layers: value true must be"):
        load_model(path)


def test_stale_derived_memory_bytes_asks_for_a_whole_byte_count(tmp_path):
    """`hardware show --format yaml` writes gpu.memory_bytes; edited memory_gib makes it stale. The message
    gives the byte count to write as an integer: 40 GiB = 42,949,672,960 bytes."""
    data = to_dict(load_cluster("dgx-h100"))
    data["gpu"]["memory_gib"] = 40
    data["gpu"]["memory_bytes"] = 1
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump(data))
    with pytest.raises(SpecError) as err:
        load_cluster(path)
    assert "give 42,949,672,960" in str(err.value) and "e+10" not in str(err.value)
