"""Whether the copy of an object the watch delivered can be decided from without reading
it again.

A reconcile decides from the watch's copy (kopf's index) and writes the status guarded
by that copy's resourceVersion, so a copy that is stale because somebody else wrote
since fails that write with 409 and the reconcile reads the object and decides again.
One staleness the guard alone would not catch before child writes: this process's own
last status write not yet echoed by the watch (a reconcile woken again before the watch
caught up). Its resourceVersion is remembered; a copy older than it is read fresh.

resourceVersions are opaque to clients by contract; the API server's are decimal
integers (etcd revisions) in practice. Only those are ordered here: any other pair of
values is "cannot tell", which reads fresh (the safe side), as does no copy at all.
"""

from __future__ import annotations


def watched_copy_is_current(watched: str | None, written: str | None) -> bool:
    """True when a copy of resourceVersion `watched` is at least as new as `written`, the
    resourceVersion this process's last write of the object produced (None: none made)."""
    if watched is None:
        return False
    if written is None:
        return True
    if not (watched.isdecimal() and written.isdecimal()):
        return watched == written
    return int(watched) >= int(written)
