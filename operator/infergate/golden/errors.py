"""Errors of the golden record store.

```
InfergateError
└── GoldenError                  anything the record store raises on purpose
    ├── GoldenConfigError        the store is configured wrongly (URL, bucket, credentials)
    ├── GoldenUnavailableError   the store could not be reached; trying again may help
    ├── GoldenNotFoundError      no record matches what was asked for
    ├── GoldenIntegrityError     a record is corrupt: digest or size mismatch, unreadable entry
    │   └── GoldenMissingError   a blob its index entry lists is absent
    └── GoldenBudgetError        the record would not fit maxBytes even without hidden states
```

A check whose baseline is a golden record ends in Error on any of these, never Passed.
"""

from __future__ import annotations

from infergate.errors import InfergateError


class GoldenError(InfergateError):
    """Base of every error the golden record store raises on purpose."""


class GoldenConfigError(GoldenError):
    """The store is configured wrongly; the message names the setting and what is allowed."""


class GoldenUnavailableError(GoldenError):
    """The store could not be reached or failed on its side; a retry may help."""


class GoldenNotFoundError(GoldenError):
    """No golden record matches the deployment, revision and suite asked for."""


class GoldenIntegrityError(GoldenError):
    """A record is corrupt: a blob's digest or size differs from its entry, or the entry
    itself cannot be read."""


class GoldenMissingError(GoldenIntegrityError):
    """A blob that a record's index entry lists is absent from the store."""


class GoldenBudgetError(GoldenError):
    """A record would exceed its byte budget even with no hidden states stored."""
