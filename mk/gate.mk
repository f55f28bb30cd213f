# Gate-quality benchmark: harmful and benign changes of the fixture model, recorded on
# the real engines and judged by `infergate parity compare` with the profile a user
# would choose (bench/gate_bench.py). Its table goes to experiments/GATE_BENCH.md.
#
#   make gate-bench    records under $(GATE_BENCH_OUT) (reused when present), ~20-30 min

GATE_BENCH_OUT ?= out/gate-bench

.PHONY: gate-bench

gate-bench: venv engines
	$(PY) bench/gate_bench.py --out $(GATE_BENCH_OUT)
