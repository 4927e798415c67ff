# Two commands set everything up on a fresh machine: `make plan` and `make test`.
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: plan test test-deep bench clean calibrate calibrate-serving validate

$(STAMP): pyproject.toml
	test -x $(PY) || python3 -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[test]'
	touch $(STAMP)

plan: $(STAMP)
	$(VENV)/bin/planner plan --model llama-3.1-70b --cluster dgx-h100 --gpus 64

# Derandomized property tests (tests/budget.py): the same examples on every run; two workers
# (pytest-xdist), one per core of the reference machine.
test: $(STAMP)
	HYPOTHESIS_PROFILE=ci $(PY) -m pytest -n 2

# Property tests with fresh random examples, >= 10x the CI budget (2,000 for the brute-force
# plan test), twice, each under its own printed seed (rerun one with --hypothesis-seed=SEED).
DEEP_TESTS := $(shell grep -l '@given' tests/test_*.py)
test-deep: $(STAMP)
	@for run in 1 2; do \
	  seed=$$(od -An -N4 -tu4 /dev/urandom | tr -d ' '); \
	  echo "test-deep run $$run: --hypothesis-seed=$$seed"; \
	  HYPOTHESIS_PROFILE=deep $(PY) -m pytest --hypothesis-seed=$$seed \
	    --hypothesis-show-statistics $(DEEP_TESTS) || exit 1; \
	done

# Bytecode first, as a wheel install has it: under PYTHONDONTWRITEBYTECODE every run would
# otherwise recompile planner's sources, which the bench would time as if it were planning.
bench: $(STAMP)
	$(PY) -m compileall -q planner
	$(PY) bench/run.py

clean:
	rm -rf $(VENV) build *.egg-info .pytest_cache

# Refit the serving latency model's [Empirical] coefficients (calibration/serving.yaml) on the FIT part
# of tests/data/reference/serving_measurements.csv; prints the evaluation-part error.
calibrate-serving: $(STAMP)
	$(PY) -m planner.serve_validate --write

# Refit the step-time model's [Empirical] GEMM-efficiency constants per GPU family
# (calibration/training.yaml) on the FIT part of tests/data/reference/training_runs.yaml +
# expert_configs.yaml; prints the evaluation-part error.
calibrate: $(STAMP)
	$(PY) -m planner.calibrate --write

# Regenerate docs/validation.md: every row of tests/data/reference/training_runs.yaml and
# expert_configs.yaml through `explain`, the training and memory suites over all rows and over the
# evaluation part (tests/test_validate_training.py checks the page is current).
validate: $(STAMP)
	$(PY) -m planner.validate_training --write
