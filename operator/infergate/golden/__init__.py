"""Golden records: what both sides of a Passed parity check answered, kept for later checks.

A golden record is one side's `ParityRecord` (the `infergate.recordio` format:
safetensors per prompt plus a JSON manifest) for one suite, stored under the
revision's hash, the suite's content digest and the engine's fingerprint, so a later
check can use it as its baseline when no pods of that revision run (rollback, a new
cluster, a migration to other hardware) and a drift watch can re-check a stable
revision against itself.

Layout in a store (a directory on a PVC, or a bucket prefix on S3-compatible storage):

    records/<namespace>/<deployment>/<entry id>/manifest.json        the side's record
    records/<namespace>/<deployment>/<entry id>/prompts/000000.safetensors
    records/<namespace>/<deployment>/<entry id>/hidden/000000.safetensors  (summaries)
    index/<namespace>/<deployment>/<entry id>.json                    one index entry

An index entry (`GoldenEntry`) lists every blob of its record with its sha256 and size,
and is written only after all of them: a record without an entry is unfinished and
never read. Entries are never rewritten, and every writer writes entries under names
of its own, so concurrent writers cannot corrupt the index. Reads check every digest;
a corrupt or missing record raises `GoldenIntegrityError`, never a pass.

Modules: `errors` (the error tree), `keys` (suite digest, entry names), `policy` (the
hidden-state size policy and budget), `summary` (per-position hidden-state summaries),
`entry` (the index entry model), `retention` (what to delete, pure), `blobs` (the
directory backend and the backend interface), `s3` (the S3-compatible backend),
`recording` (staging a check's two records, publishing them on Passed), `store`
(listing, finding, verified reading, deleting), `config` (a store from its settings).
"""
