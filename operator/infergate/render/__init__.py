"""Pure rendering: an InferenceDeployment spec -> the desired Kubernetes objects of a revision."""

from infergate.render.objects import RevisionObjects, render_revision
from infergate.render.revision import (
    RevisionHashError,
    canonical_json,
    revision_hash,
    revision_identity,
    short_revision,
)

__all__ = [
    "RevisionHashError",
    "RevisionObjects",
    "canonical_json",
    "render_revision",
    "revision_hash",
    "revision_identity",
    "short_revision",
]
