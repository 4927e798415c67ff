"""A GPU without measured training runs borrows the stand-in family's GEMM-efficiency curve scaled
by the two GPUs' measured GEMM ceilings (senior review 11 finding 3: MI300X got H100's 0.672 of its
datasheet peak, 58% bf16 MFU and 1.44x H100 per GPU, above the 708 TFLOP/s AMD measures its best
bf16 GEMM at).

Numbers (hand arithmetic from the published tables, not from the code):
- AMD ROCm blog "Measuring Max-Achievable FLOPs - Part 2" Table 1, MI300X: bf16 708, fp16 654,
  fp8 1273 TFLOP/s; datasheet peaks 1307.4 (bf16, fp16) and 2614.9 (fp8).
- stas00/ml-engineering MAMF table, H100 SXM: bf16 792.1 of the 989.4 peak (no fp8 figure: the
  bf16 fraction stands in, `compute._reference`).
bf16: (708 / 1307.4) / (792.1 / 989.4) = 0.54153 / 0.80059 = 0.67641
fp8:  (1273 / 2614.9) / (792.1 / 989.4) = 0.48682 / 0.80059 = 0.60808
"""

from __future__ import annotations

import pytest
import yaml

from planner.cost.compute import CALIBRATION_FILE, achieved_flops, ceiling_ratio, gemm_efficiency, unfitted_note
from planner.errors import SpecError
from planner.specs.cluster import load_cluster

H100 = yaml.safe_load(CALIBRATION_FILE.read_text())["families"]["H100"]
MI300X = load_cluster("mi300x", gpus=8).gpu


def test_mi300x_catalog_carries_amds_published_ceilings():
    assert MI300X.max_achievable_tflops == {"bf16": 708, "fp16": 654, "fp8": 1273}
    assert load_cluster("dgx-h100").gpu.max_achievable_tflops == {"bf16": 792.1}


@pytest.mark.parametrize("precision, ratio", [("bf16", 0.67641), ("fp8", 0.60808)])
def test_mi300x_ratio_is_the_two_ceiling_fractions(precision, ratio):
    assert ceiling_ratio(MI300X, precision) == pytest.approx(ratio, rel=1e-4)


def test_mi300x_efficiency_is_h100_curve_times_the_ratio():
    d = 8192   # e_max d / (d + d_half), H100's constants from the calibration file
    curve = d / (d + H100["d_half"])
    assert gemm_efficiency(MI300X, gemm_dim=d) == pytest.approx(H100["e_max"] * 0.67641 * curve, rel=1e-4)
    assert gemm_efficiency(MI300X, gemm_dim=d, precision="fp8") == pytest.approx(
        H100["fp8_e_max"] * 0.60808 * curve, rel=1e-4)


@pytest.mark.parametrize("precision, ceiling_tflops", [("bf16", 708), ("fp8", 1273)])
def test_mi300x_large_gemm_stays_below_amds_ceiling(precision, ceiling_tflops):
    assert achieved_flops(MI300X, precision, gemm_dim=16384) < ceiling_tflops * 1e12


@pytest.mark.parametrize("cluster", ["dgx-h100", "hgx-h200", "dgx-a100-80g", "dgx-b200", "dgx2-v100"])
def test_fitted_families_and_gpus_without_a_ceiling_are_unscaled(cluster):
    assert ceiling_ratio(load_cluster(cluster, gpus=8).gpu, "bf16") == 1.0


def test_warning_names_the_scaling_and_stays_an_extrapolation():
    note = unfitted_note(MI300X)
    # H100's fitted e_max (calibration file) x (708 / 1307.4) / (792.1 / 989.4) = e_max x 0.67641
    assert "708 of 1,307 bf16" in note and "792 of 989 bf16" in note
    assert f"e_max {H100['e_max'] * 0.67641:.3f}" in note
    assert "extrapolation of unknown error" in note


def _write(tmp_path, ceilings: str):
    text = (CALIBRATION_FILE.parents[1] / "hardware" / "mi300x.yaml").read_text()
    start = text.index("  max_achievable_tflops:")
    end = text.index("  source:", start)
    path = tmp_path / "gpu.yaml"
    path.write_text(text[:start] + ceilings + text[end:])
    return path


def test_a_ceiling_above_the_peak_is_bad_input(tmp_path):
    path = _write(tmp_path, "  max_achievable_tflops:\n    bf16: 1400\n")
    with pytest.raises(SpecError, match=r"exceeds the bf16 peak 1,307.4"):
        load_cluster(path)


def test_a_ceiling_for_a_dtype_without_a_peak_is_bad_input(tmp_path):
    path = _write(tmp_path, "  max_achievable_tflops:\n    fp4: 100\n")
    with pytest.raises(SpecError, match="unknown key"):
        load_cluster(path)
