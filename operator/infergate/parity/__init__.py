"""The parity core: pure numerics comparing what two engines produced for one suite.

record          ParityRecord, RecordMeta, PromptRecord (file I/O lives in infergate.recordio)
wire            the camelCase, frozen model every parity document shares
metrics         ParityResult and its parts; stats, the intervals and bounds behind them
fingerprints    what each side ran with (tokenizer, weights, versions, suite, sampling)
thresholds      Thresholds and ProfileName (pydantic only; the CRD schema is built from them)
profiles        default thresholds per kind of change; profile_sources, where each comes from
sides           before any prompt: same suite and run, which config and fingerprints differ
tokens, logprobs, hidden, hygiene    per-prompt measures; hidden states stream
token_suite, logprob_suite, long_prompts    the suite's metrics and their bounds
compare         ParityComparison: feed prompt pairs, finalize into a ParityResult
checks          each threshold against its bounds; regression, against the last pass
verdict         Passed / Failed / Inconclusive / Error, with reasons
layers          the first diverging layer of a failed check

No module here touches the network, the API server or files, and none renders: the
report people read is `infergate.report`, the runner's overhead `infergate.accounting`.
Importing this package imports nothing heavy, so `infergate.parity.thresholds` stays
cheap to import.
"""
