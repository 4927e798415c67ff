"""The plan-file type (`planner.plan_document.PlanFile`) that `plan -o` writes and `check` reads:
to_dict / from_dict round trips over every optional-key combination (hypothesis), every required
key is required by from_dict, and the writer's own output reads back to the same file.
The key lists are written out here from the file format (README "plan files"), not imported."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from budget import examples
from hypothesis import given, settings
from hypothesis import strategies as st

from planner import plan as plan_api
from planner.errors import SpecError
from planner.plan_document import KEYS, OPTIONAL, PlanFile
from planner.specs.cluster import load_cluster
from planner.specs.model import load_model

BASE = Path("tests/data/plans/llama-3.1-70b-64xh100-pp4-cp4.plan.yaml")
"""A `planner plan -o` file kept in the repository (tests/test_check_plan_file.py)."""

TOP = ["kind", "version", "model", "cluster", "gpus", "request", "plan", "predicted", "solver"]
REQUEST_REQUIRED = ["seq_len", "global_batch_size", "precision", "optimizer", "framework",
                    "headroom", "reserve_bytes"]
REQUEST_OPTIONAL = ["recompute_modules", "offload_modules", "grad_reduce_dtype", "fp8_recipe", "fp8_param_gather",
                    "precision_aware_optimizer",
                    "main_params_dtype", "main_grads_dtype", "exp_avg_dtype", "exp_avg_sq_dtype",
                    "cross_entropy_fusion", "loss_chunks", "mtp_layers",
                    "fixed"]
PAR_REQUIRED = ["dp", "tp", "pp", "cp", "ep", "zero_stage", "sequence_parallel",
                "micro_batch_size", "global_batch_size", "num_microbatches", "vpp", "recompute",
                "pipeline_layers"]
PAR_OPTIONAL = ["etp", "overlap", "pipeline_layout", "cp_comm_type", "moe_dispatcher", "compile",
                "recompute_modules", "offload_modules", "recompute_layers", "fp8_param_gather", "buckets",
                "offload"]

VALUE = st.one_of(st.integers(0, 2**40), st.booleans(), st.none(), st.text(max_size=8),
                  st.lists(st.integers(0, 99), max_size=4))


def test_schema_is_the_file_format():
    assert list(KEYS[""]) == TOP
    assert set(KEYS["request"]) == set(REQUEST_REQUIRED + REQUEST_OPTIONAL)
    assert set(KEYS["plan.parallelism"]) == set(PAR_REQUIRED + PAR_OPTIONAL)
    assert set(REQUEST_OPTIONAL + PAR_OPTIONAL + ["predicted", "solver"]) == OPTIONAL


def _sections(draw, required, optional):
    keys = required + [k for k in optional if draw(st.booleans())]
    return {k: draw(VALUE) for k in keys}


@st.composite
def plan_files(draw) -> PlanFile:
    return PlanFile(model=draw(st.text(min_size=1, max_size=12)),
                    cluster=draw(st.text(min_size=1, max_size=12)),
                    gpus=draw(st.integers(1, 2**20)),
                    request=_sections(draw, REQUEST_REQUIRED, REQUEST_OPTIONAL),
                    parallelism=_sections(draw, PAR_REQUIRED, PAR_OPTIONAL),
                    predicted=draw(st.one_of(st.none(), st.dictionaries(st.text(max_size=6), VALUE,
                                                                        max_size=3))),
                    solver=draw(st.one_of(st.none(), st.dictionaries(st.text(max_size=6), VALUE,
                                                                     max_size=3))))


@settings(max_examples=examples(200), deadline=None)
@given(doc=plan_files())
def test_round_trip(doc):
    data = doc.to_dict()
    assert PlanFile.from_dict(data, "x.yaml") == doc
    assert PlanFile.from_dict(data, "x.yaml").to_dict() == data
    # the top level in the written order; predicted / solver only when present
    assert list(data) == [k for k in TOP if k not in ("predicted", "solver")
                          or getattr(doc, k) is not None]
    assert data["kind"] == "training-plan" and data["version"] == 1
    assert list(data["plan"]) == ["parallelism"]


@pytest.mark.parametrize("section, key", [("", k) for k in TOP if k not in ("predicted", "solver")]
                         + [("request", k) for k in REQUEST_REQUIRED]
                         + [("plan.parallelism", k) for k in PAR_REQUIRED])
def test_every_required_key_is_required(section, key):
    data = yaml.safe_load(BASE.read_text())
    where = data
    for part in filter(None, section.split(".")):
        where = where[part]
    del where[key]
    with pytest.raises(SpecError) as err:
        PlanFile.from_dict(data, "x.yaml")
    dotted = f"{section}.{key}" if section else key
    assert err.value.key == dotted and err.value.file == "x.yaml"


@pytest.mark.parametrize("section, key", [("request", k) for k in REQUEST_OPTIONAL]
                         + [("plan.parallelism", k) for k in PAR_OPTIONAL]
                         + [("", "predicted"), ("", "solver")])
def test_every_optional_key_may_be_absent(section, key):
    data = yaml.safe_load(BASE.read_text())
    where = data
    for part in filter(None, section.split(".")):
        where = where[part]
    where.pop(key, None)
    assert PlanFile.from_dict(data, "x.yaml").to_dict() == data


def test_the_writer_writes_a_plan_file():
    """`plan.plan_file` (what `plan -o` writes) is PlanFile.to_dict: it reads back to itself."""
    model = load_model("tests/data/models/tiny.yaml")
    cluster = load_cluster("tests/data/clusters/custom-pcie.yaml", gpus=4)
    data = plan_api.plan(model, cluster, seq_len=1024, global_batch_size=8, top_k=2)
    for index in range(len(data["plans"])):
        written = plan_api.plan_file(data, index, model_ref="m.yaml", cluster_ref="c.yaml")
        doc = PlanFile.from_dict(written)
        assert doc.to_dict() == written
        assert (doc.model, doc.cluster, doc.gpus) == ("m.yaml", "c.yaml", 4)
        assert doc.parallelism == data["plans"][index]["parallelism"]
        assert doc.solver["plan_rank"] == index + 1


def test_the_kept_plan_file_reads_back_unchanged():
    data = yaml.safe_load(BASE.read_text())
    assert PlanFile.from_dict(data, str(BASE)).to_dict() == data
