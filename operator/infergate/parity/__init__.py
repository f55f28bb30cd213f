"""The parity core: pure numerics comparing what two engines produced for one suite.

record     ParityRecord, RecordMeta, PromptRecord (file I/O lives in infergate.recordio)
thresholds Thresholds and ProfileName (pydantic only; the CRD schema is built from them)
profiles   default thresholds per kind of change, each with its source
tokens, logprobs, hidden, hygiene   per-prompt measures; hidden states stream
compare    ParityComparison: feed prompt pairs, finalize into a ParityResult
verdict    Passed / Failed / Error, with reasons; regression by confidence bounds

No module here touches the network, the API server or files, and none renders: the
report people read is `infergate.report`, the runner's overhead `infergate.accounting`.
Importing this package imports nothing heavy, so `infergate.parity.thresholds` stays
cheap to import.
"""
