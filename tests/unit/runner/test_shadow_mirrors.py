"""Two mirror pods, each the real mirror app (proxy and control API), with half the copies.

Neither pod sees enough copies for the profile's evidence floor; the runner's shadow flow
(its real `MirrorSessions` client) opens a session on both, lets traffic through their
proxies, takes both pods' scored pairs and judges them together: Passed.

Nothing listens on a socket. The mirrors run on an event loop of their own thread, as
they would in their pods; the runner's blocking HTTP client reaches their control apps
through a transport that hands each request to that loop. Both sides' engines are one
word-level engine behind httpx.MockTransport (identical stable and canary).
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from infergate.api.enums import CheckPhase
from infergate.api.parity_check import ParityCheckSpec
from infergate.jsontypes import JSON
from infergate.mirror.app import Mirror, control_app, proxy_app
from infergate.render.labels import LABEL_DEPLOYMENT, LABEL_MANAGED_BY, LABEL_REVISION, MANAGED_BY
from infergate.runner import shadow
from infergate.runner.endpoints import ENDPOINTSLICE_CONTROLLER
from infergate.runner.shadow import MirrorSessions
from tests.unit.parity.builders import meta
from tests.unit.runner.fakes import controller_ref, uid_of
from tests.unit.runner.test_shadow import COPIES, _Runner, _shadow_spec

WORDS = [f"w{i}" for i in range(60)]
"""The engine's vocabulary; id 63 is every position's runner-up, never an answer."""
CANARY = "bbbbbbbbbb"
PODS = ("127.0.0.9", "127.0.0.10")
MAX_POLLS = 3000


def _engine(request: httpx.Request) -> httpx.Response:
    """Tokenize by words; score any sequence at -0.1 per token; answer `max_tokens` words."""
    body = json.loads(request.content)
    if request.url.path == "/tokenize":
        return httpx.Response(
            200, json={"tokens": [WORDS.index(w) for w in body["prompt"].split()]}
        )
    if "prompt_logprobs" in body:
        entries: list[Any] = [None]
        entries += [
            {str(t): {"logprob": -0.1, "rank": 1}, "63": {"logprob": -3.0, "rank": 2}}
            for t in body["prompt"][1:]
        ]
        return httpx.Response(200, json={"choices": [{"prompt_logprobs": entries}]})
    text = " ".join(WORDS[i % len(WORDS)] for i in range(body["max_tokens"]))
    return httpx.Response(200, json={"choices": [{"text": text, "finish_reason": "length"}]})


async def _served(request: Request) -> Response:
    """The stable engine as the proxy streams it (an ASGI app: the proxy reads it raw)."""
    answer = _engine(httpx.Request("POST", str(request.url), content=await request.body()))
    return JSONResponse(answer.json(), status_code=answer.status_code)


STABLE = Starlette(routes=[Route("/{path:path}", _served, methods=["POST"])])


class _Reads:
    """The mirror's API reads: the canary's revision Service and its one ready endpoint,
    published by the cluster, and any `forged` slices besides."""

    def __init__(self, *, published: bool = True, forged: tuple[str, ...] = ()) -> None:
        self.published, self.forged = published, forged

    def service(self, name: str) -> JSON | None:
        if name != f"qwen-{CANARY}":
            return None
        labels = {LABEL_MANAGED_BY: MANAGED_BY, LABEL_DEPLOYMENT: "qwen", LABEL_REVISION: CANARY}
        return {
            "metadata": {"name": name, "uid": uid_of(name), "labels": labels},
            "spec": {"ports": [{"name": "http", "port": 8000}]},
        }

    def endpoint_slices(self, service: str) -> list[JSON]:
        published = [_slice(service, "127.0.0.20", ENDPOINTSLICE_CONTROLLER)]
        forged = [_slice(service, address, "tenant") for address in self.forged]
        return [*(published if self.published else []), *forged]


def _slice(service: str, address: str, manager: str) -> JSON:
    return {
        "metadata": {
            "name": f"{service}-{address}",
            "labels": {
                "kubernetes.io/service-name": service,
                "endpointslice.kubernetes.io/managed-by": manager,
            },
            "ownerReferences": [controller_ref("Service", service)],
        },
        "addressType": "IPv4",
        "ports": [{"name": "http", "port": 8000}],
        "endpoints": [{"addresses": [address], "conditions": {"ready": True}}],
    }


class _Stable:
    urls = ("http://stable",)
    problem = None

    def pick(self) -> str:
        return "http://stable"


def _mirror(reads: _Reads | None = None) -> Mirror:
    return Mirror(
        "qwen",
        reads=reads or _Reads(),
        upstream=_Stable(),  # type: ignore[arg-type]
        proxy_http=httpx.AsyncClient(transport=httpx.ASGITransport(app=STABLE)),
        score_http=httpx.AsyncClient(transport=httpx.MockTransport(_engine)),
    )


class _Pods:
    """The mirror pods, on their own event loop in a thread."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()
        self.mirrors = {address: _mirror() for address in PODS}

    def call(self, app: Any, method: str, url: str, content: bytes = b"") -> httpx.Response:
        async def send() -> httpx.Response:
            async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app)) as http:
                answer = await http.request(
                    method, url, content=content, headers={"content-type": "application/json"}
                )
                return httpx.Response(
                    answer.status_code, headers=answer.headers, content=answer.content
                )

        return asyncio.run_coroutine_threadsafe(send(), self.loop).result(timeout=60)

    def control(self, request: httpx.Request) -> httpx.Response:
        """The runner's transport: each pod's control app by its address."""
        mirror = self.mirrors[request.url.host]
        return self.call(control_app(mirror), request.method, str(request.url), request.content)

    def client_request(self, address: str, prompt: str) -> None:
        body = {"model": "tiny-qwen", "prompt": prompt, "max_tokens": 128, "temperature": 0}
        answer = self.call(
            proxy_app(self.mirrors[address]),
            "POST",
            f"http://{address}:8000/v1/completions",
            json.dumps(body).encode(),
        )
        assert answer.status_code == 200

    def close(self) -> None:
        for mirror in self.mirrors.values():
            asyncio.run_coroutine_threadsafe(mirror.close(), self.loop).result(timeout=60)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(timeout=60)
        self.loop.close()


@pytest.fixture
def pods() -> Iterator[_Pods]:
    running = _Pods()
    yield running
    running.close()


class _TwoMirrorPods(_Runner):
    def mirror_service(self, name: str) -> tuple[dict[str, Any] | None, list[dict[str, Any]]]:
        service, slices = super().mirror_service(name)
        endpoints = [{"addresses": [a], "conditions": {"ready": True}} for a in PODS]
        slices[0]["endpoints"] = endpoints
        return service, slices


def _spec() -> ParityCheckSpec:
    spec = _shadow_spec()
    settings = {"minRequests": COPIES, "sampleRate": 1.0, "maxRequestsPerSecond": 1000.0,
                "maxQueue": 64}  # fmt: skip
    return spec.model_copy(update={"shadow": type(spec.shadow).model_validate(settings)})


def test_two_mirror_pods_with_half_the_copies_each_pass_together(
    pods: _Pods, monkeypatch: pytest.MonkeyPatch
) -> None:
    control = httpx.Client(transport=httpx.MockTransport(pods.control))
    taken: list[Any] = []

    class _Sessions(MirrorSessions):
        def results(self, limit: int) -> list[Any]:
            taken.extend(super().results(limit))
            return taken

    monkeypatch.setattr(
        shadow, "MirrorSessions", lambda urls, session: _Sessions(urls, session, control)
    )
    polls = {"n": 0}

    def sleep(_: float) -> None:
        # The first poll found the sessions open: clients send half the copies to each pod.
        if polls["n"] == 0:
            for i in range(COPIES):
                pods.client_request(PODS[i % 2], f"w{i} w{(i * 7) % 60} w2")
        polls["n"] += 1
        assert polls["n"] < MAX_POLLS, "the mirrors never scored the copies"
        time.sleep(0.01)  # let the pods' workers score (what the real poll interval does)

    runner = _TwoMirrorPods()
    shadow.run_shadow(runner, _spec(), sleep=sleep)
    [(verdict, extra)] = runner.finished
    assert extra["shadow"]["scored"] == COPIES
    assert extra["shadow"]["greedy"] == COPIES
    assert extra["shadow"]["pods"] == 2
    # Each pod alone is below the profile's floor of 32 prompts, and both number their
    # copies alike: the runner tells them apart.
    assert [pod["counts"]["scored"] for pod in taken] == [COPIES // 2, COPIES // 2]
    assert [pod["pairs"][0]["baseline"]["promptId"] for pod in taken] == ["m000001"] * 2
    # The pods were closed once their results were taken.
    assert all(not m.sessions for m in pods.mirrors.values())
    assert verdict.phase is CheckPhase.PASSED, verdict.summary
    [report] = runner.reports
    assert report["result"]["metrics"]["prompts"] == COPIES
    assert report["result"]["outputs"] == []


def test_a_session_never_copies_to_a_pod_only_a_forged_slice_names(pods: _Pods) -> None:
    """The canary's Service has no pod of its own yet, and a tenant's slice points it at
    a pod serving the stable model: the mirror refuses the session and says why."""
    mirror = _mirror(_Reads(published=False, forged=("127.0.0.66",)))
    side = meta().model_dump(mode="json")
    body = {
        "id": "llm/check", "candidateRevision": CANARY, "model": "tiny-qwen",
        "sampleRate": 1.0, "maxRequestsPerSecond": 10.0, "maxQueue": 8, "windowSeconds": 60,
        "baseline": side, "candidate": side,
    }  # fmt: skip
    answer = pods.call(
        control_app(mirror), "POST", "http://127.0.0.9:8001/mirror/sessions",
        json.dumps(body).encode(),
    )  # fmt: skip
    asyncio.run_coroutine_threadsafe(mirror.close(), pods.loop).result(timeout=60)
    assert answer.status_code == 503, answer.text
    error = answer.json()["error"]
    assert "the canary has no ready endpoint; 1 untrusted EndpointSlices ignored" in error
    assert "is managed by 'tenant'" in error
