"""Where live requests go while a canary is checked: `spec.rollout.traffic`.

Three mechanisms, one of them in effect (and said in `status.trafficMechanism`):

- `dark` (the default): the stable Service selects only the stable revision's pods
  until the canary's check passes; the parity runner reaches the canary through its
  own revision Service; promotion moves traffic.
- `replicas`: the stable Service selects every revision's pods, so the canary takes
  its replica share of traffic while it is checked.
- `gateway`: a Gateway API HTTPRoute with weighted backends (the revision Services):
  weight 0 for the canary until its check passes, then the stated steps, each with a
  pause and an optional re-check; a failed step rolls the canary back.
"""

from __future__ import annotations

from enum import StrEnum
from itertools import pairwise
from typing import Annotated, Self

from pydantic import ConfigDict, Field, StringConstraints, model_validator

from infergate.api.base import DNS_LABEL_MAX, NAME_MAX, KubeModel, cel, cel_rules
from infergate.api.common import ObjectName

STEPS_MAX = 20
PAUSE_MAX = 86400
Hostname = Annotated[
    str,
    StringConstraints(
        min_length=1,
        max_length=NAME_MAX,
        pattern=r"^(\*\.)?[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$",
    ),
]
SectionName = Annotated[
    str,
    StringConstraints(
        min_length=1, max_length=DNS_LABEL_MAX, pattern=r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"
    ),
]


class TrafficMode(StrEnum):
    """How live traffic reaches a canary: dark (none until its check passes), replicas (its
    replica share from the start) or gateway (HTTPRoute weights: 0 until Passed, then steps).
    """

    DARK = "dark"
    REPLICAS = "replicas"
    GATEWAY = "gateway"


class GatewayParent(KubeModel):
    """A Gateway the HTTPRoute attaches to (Gateway API parentRef)."""

    name: ObjectName
    """Name of the Gateway."""
    namespace: ObjectName | None = None
    """Namespace of the Gateway; unset: the InferenceDeployment's namespace."""
    section_name: SectionName | None = None
    """Listener of the Gateway to attach to; unset: every listener that allows the route."""


class TrafficStep(KubeModel):
    """One step of a gateway rollout after the canary's check passed."""

    weight: int = Field(ge=1, le=100)
    """Share of requests (percent) the canary gets during this step."""
    pause_seconds: int = Field(default=0, ge=0, le=PAUSE_MAX)
    """Seconds the step holds its weight before the next step (or promotion)."""
    recheck: bool = False
    """At the end of the pause, run the parity check again against the canary while it serves
    this weight; the next step comes only when it passes, a failure rolls the canary back.
    """


class GatewayTraffic(KubeModel):
    """The HTTPRoute infergate writes, and the steps its canary weight follows."""

    model_config = ConfigDict(
        json_schema_extra=cel_rules(
            cel(
                "self.steps.map(s, s.weight).isSorted() && "
                "self.steps.all(s, self.steps.exists_one(t, t.weight == s.weight))",
                "steps must have increasing weights",
                field_path=".steps",
            ),
        )
    )

    parent_refs: list[GatewayParent] = Field(min_length=1, max_length=8)
    """Gateways the HTTPRoute `<name>` attaches to."""
    hostnames: list[Hostname] = Field(default_factory=list, max_length=16)
    """Hostnames the route answers; unset: those of the Gateway's listeners."""
    steps: list[TrafficStep] = Field(
        default_factory=lambda: [
            TrafficStep(weight=10, pause_seconds=60, recheck=True),
            TrafficStep(weight=50, pause_seconds=60),
        ],
        min_length=1,
        max_length=STEPS_MAX,
        json_schema_extra={
            "default": [
                {"weight": 10, "pauseSeconds": 60, "recheck": True},
                {"weight": 50, "pauseSeconds": 60},
            ]
        },
    )
    """Canary weights after its check passed, in increasing order; after the last step's pause
    (and re-check) the canary is promoted and takes every request.
    """

    @model_validator(mode="after")
    def _increasing(self) -> Self:
        weights = [s.weight for s in self.steps]
        if any(b <= a for a, b in pairwise(weights)):
            raise ValueError(
                f"rollout.traffic.gateway.steps: weights {weights} are not allowed; "
                "they must increase from step to step"
            )
        return self


class Traffic(KubeModel):
    """Which requests reach a canary before its check passes, and how traffic moves after."""

    model_config = ConfigDict(
        json_schema_extra=cel_rules(
            cel(
                "(has(self.mode) && self.mode == 'gateway') == has(self.gateway)",
                "gateway is required with mode gateway and not allowed with another mode",
                field_path=".gateway",
            ),
        )
    )

    mode: TrafficMode = TrafficMode.DARK
    """dark (default: the stable Service selects only the stable revision until the canary's check
    passes), replicas (the canary takes its replica share while checked) or gateway (an
    HTTPRoute's weights: 0 until the check passes, then gateway.steps).
    """
    gateway: GatewayTraffic | None = None
    """The HTTPRoute and its steps; required with mode gateway."""

    @model_validator(mode="after")
    def _gateway_with_mode(self) -> Self:
        if (self.mode is TrafficMode.GATEWAY) != (self.gateway is not None):
            raise ValueError(
                f"rollout.traffic: mode {self.mode.value!r} with"
                f"{'' if self.gateway is not None else 'out'} gateway is not allowed; gateway "
                "is required with mode gateway and not allowed with another mode"
            )
        return self
