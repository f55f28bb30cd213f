"""A revision's measured noise, kept in the golden store beside its records.

One small JSON per revision, `noise/<namespace>/<deployment>/<revision>.json` (a
`parity.calibrated.ModelNoise`), written when the revision's A/A noise is measured (the
runner, before the first check whose baseline it is and whose limits read it, or
`infergate parity calibrate --store`) or an expected change's pair is kept (the runner,
after a Passed dtype-change check of one set of weights makes it stable), and read by
every later check whose baseline is that revision. The same key in a directory (PVC)
store and in S3. Retention leaves it alone: it is a few hundred bytes,
and it stays meaningful as long as the revision can be a baseline. A newer measurement
of the same revision replaces the older.
"""

from __future__ import annotations

from typing import Final

from pydantic import ValidationError

from infergate.golden.errors import GoldenIntegrityError, GoldenMissingError
from infergate.golden.keys import check_name, check_revision
from infergate.golden.store import GoldenStore
from infergate.parity.calibrated import ModelNoise

NOISE: Final = "noise"


def noise_key(namespace: str, deployment: str, revision: str) -> str:
    """The object key of a revision's noise record."""
    check_name("namespace", namespace)
    check_name("deployment", deployment)
    check_revision(revision)
    return f"{NOISE}/{namespace}/{deployment}/{revision}.json"


def put_noise(store: GoldenStore, namespace: str, deployment: str, noise: ModelNoise) -> str:
    """Write `noise` (its `revision` set) for `namespace/deployment`; returns the key."""
    if noise.revision is None:
        raise ValueError("noise.revision: the revision measured must be named")
    key = noise_key(namespace, deployment, noise.revision)
    store.blobs.put_bytes(key, noise.model_dump_json(by_alias=True, indent=1).encode())
    return key


def get_noise(
    store: GoldenStore, namespace: str, deployment: str, revision: str
) -> ModelNoise | None:
    """The revision's noise record (None: none kept). `GoldenIntegrityError` when one is
    there but cannot be read as one; `GoldenUnavailableError` when the store is down."""
    key = noise_key(namespace, deployment, revision)
    try:
        data = store.blobs.get_bytes(key)
    except GoldenMissingError:
        return None
    try:
        noise = ModelNoise.model_validate_json(data)
    except ValidationError as err:
        raise GoldenIntegrityError(
            f"{store.describe()}: {key} is not a noise record: {err}"
        ) from err
    if noise.revision != revision:
        raise GoldenIntegrityError(f"{store.describe()}: {key} describes revision {noise.revision}")
    return noise
