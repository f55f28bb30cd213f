"""Resolve the sides a check compares, and wait until the live ones answer.

Each side is resolved from what the cluster says (`runner.sides`): its revision
(pinned once in the status), endpoints from EndpointSlices, engine and probes. A side
whose pods are still starting is waited for a while (`wait_for_sides`, then a retry);
a side that can never be measured (an object someone else made, a revision that does
not exist) ends the check at once, even while the other side is still starting.
"""

from __future__ import annotations

import time

from infergate.api.parity_check import ParityCheckSpec
from infergate.errors import KubeError
from infergate.plan import reasons
from infergate.render.check_names import SIDES, SideName
from infergate.runner.context import CheckEndedError, RetryableRunError, RunContext, say
from infergate.runner.drive import SideUnavailableError
from infergate.runner.golden_baseline import GOLDEN_URL_PREFIX
from infergate.runner.sides import SideResolutionError, SideTarget, resolve_side
from infergate.runner.state import RunState, need
from infergate.runner.status_writer import api_failure

WAIT_POLL_SECONDS = 2.0
"""Pause between two rounds of resolving sides that are still starting."""


def resolve_sides(run: RunContext, state: RunState) -> None:
    """Both live sides."""
    baseline, candidate = resolve(run, state, need(state.spec, "the spec"), SIDES)
    state.sides = (baseline, candidate)


def resolve_candidate(run: RunContext, state: RunState) -> None:
    """The candidate alone (the baseline is a golden record, opened next)."""
    [state.candidate] = resolve(run, state, need(state.spec, "the spec"), ("candidate",))


def check_health(run: RunContext, state: RunState) -> None:
    """Every live side's serving engine and probe answers (a golden record has none)."""
    baseline, candidate = need(state.sides, "the sides")
    say(f"baseline: {baseline.description} at {baseline.url}")
    say(f"candidate: {candidate.description} at {candidate.url}")
    wait_healthy(run, baseline, candidate)


def wait_healthy(run: RunContext, baseline: SideTarget, candidate: SideTarget) -> None:
    """Wait for the live sides' engines and probes to answer; a retry when they do not."""
    live = [t for t in (baseline, candidate) if not t.url.startswith(GOLDEN_URL_PREFIX)]
    urls = [t.url for t in live]
    urls += [t.probe_url for t in live if t.probe_url and t.probe_url not in urls]
    try:
        run.connector.health(urls, min(60.0, run.options.wait_for_sides))
    except SideUnavailableError as err:
        raise RetryableRunError(reasons.CHECK_SIDE_UNREACHABLE, str(err)) from err


def resolve(
    run: RunContext, state: RunState, spec: ParityCheckSpec, sides: tuple[SideName, ...]
) -> list[SideTarget]:
    """Every side of `sides` resolved, waiting a while for those whose pods are not ready.

    Each round tries every side, so a side that can never be measured ends the check
    at once, even while the other side is still starting.
    """
    status = state.check.get("status") or {}
    pinned = {
        "baseline": status.get("baselineRevision"),
        "candidate": status.get("candidateRevision"),
    }
    uid = str(state.check["metadata"]["uid"])
    deadline = time.monotonic() + run.options.wait_for_sides
    while True:
        resolved: list[SideTarget] = []
        waiting: Exception | None = None
        for side in sides:
            try:
                resolved.append(
                    resolve_side(
                        side, run.name, spec, reads=run.api, info=run.connector.info,
                        check_uid=uid, pinned_revision=pinned[side],
                    )
                )  # fmt: skip
            except SideResolutionError as err:
                if not err.transient:
                    reason = err.reason or reasons.CHECK_INVALID
                    raise CheckEndedError(reason, str(err)) from err
                waiting = waiting or err
            except SideUnavailableError as err:
                waiting = waiting or err
            except KubeError as err:
                raise api_failure(err) from err
        if waiting is None:
            return resolved
        if time.monotonic() > deadline:
            raise RetryableRunError(reasons.CHECK_SIDE_UNREACHABLE, str(waiting)) from waiting
        say(f"waiting: {waiting}")
        time.sleep(WAIT_POLL_SECONDS)
