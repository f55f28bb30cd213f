# Gate-quality benchmark: harmful and benign changes of the fixture model, recorded on
# the real engines and judged by `infergate parity compare` with the profile a user
# would choose (bench/gate_bench.py). Its table goes to experiments/GATE_BENCH.md.
#
#   make gate-bench                                  records under $(GATE_BENCH_OUT)
#                                                    (reused when present), ~70 min cold
#   make gate-bench GATE_BENCH_ONLY=name1,name2      only these rows; the table keeps the
#                                                    others as the last run left them

GATE_BENCH_OUT ?= out/gate-bench
GATE_BENCH_ONLY ?=

.PHONY: gate-bench

gate-bench: venv engines
	GATE_BENCH_ONLY='$(GATE_BENCH_ONLY)' $(PY) bench/gate_bench.py --out $(GATE_BENCH_OUT)
