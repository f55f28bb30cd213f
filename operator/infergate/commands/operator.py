"""`infergate operator`: run the InferenceDeployment operator (kopf).

Credentials come from the pod's ServiceAccount when running in a cluster,
otherwise from the kubeconfig (`--kubeconfig`, $KUBECONFIG or ~/.kube/config).
It watches every namespace unless `--namespace` names some (glob patterns
such as `team-*` are allowed; they need list/watch on namespaces). Liveness (kopf's
event loop answers) is served at http://ADDRESS:HEALTH_PORT/healthz; readiness (the
startup handlers ran and the process is not stopping; a follower waiting for the Lease
is ready: its caches are warm) at http://ADDRESS:METRICS_PORT/readyz, beside the
Prometheus metrics at /metrics; ADDRESS defaults to $POD_IP (set from the downward API
in the operator's Deployment), else 127.0.0.1.

With `--leader-election` (the installed Deployment runs two replicas with it), a
replica acts only while it holds the Lease `infergate-operator` in its own namespace
($POD_NAMESPACE); the other keeps its caches warm and takes over when the Lease
expires. Without it, run one replica: two operators acting on the same objects
undo each other.

ParityCheck runner Jobs, their ServiceAccounts and NetworkPolicies are made in the
runner namespace (`--runner-namespace`, default the operator's own, $POD_NAMESPACE,
else infergate-system), never in the check's: a namespace's users could otherwise mint
the runner's token and write any verdict. It must be a namespace no tenant may write
to; with `--namespace`, the operator watches it too.

SIGTERM (or SIGINT) stops kopf, which runs the cleanup handlers (the Lease is given
up, the API client closed); then the process ends at once, whatever worker threads
are still inside a blocking API call.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import re
import socket
import sys
import uuid
from dataclasses import replace
from pathlib import Path
from typing import Any, NoReturn

import yaml
from pydantic import ValidationError

from infergate.api.golden import GoldenSpec
from infergate.plan.leadership import DEFAULT_TIMING

_DEFAULT_METRICS_PORT = 9090
_DEFAULT_HEALTH_PORT = 8080


def register(subparsers: Any) -> None:
    """Add the `operator` subcommand."""
    parser = subparsers.add_parser(
        "operator",
        help="run the InferenceDeployment operator",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "-n",
        "--namespace",
        action="append",
        default=[],
        metavar="PATTERN",
        help="watch only namespaces matching PATTERN (repeatable); default: all namespaces",
    )
    parser.add_argument("--kubeconfig", help="kubeconfig file (default: in-cluster, $KUBECONFIG)")
    parser.add_argument(
        "--resync-seconds",
        type=float,
        default=300.0,
        help="longest time between two reconciles of a deployment when nothing changes: a "
        "safety net, since changes wake a reconcile and deadlines are scheduled (default: 300)",
    )
    parser.add_argument(
        "--bind-address",
        default=os.environ.get("POD_IP") or "127.0.0.1",
        help="address of the health and metrics servers (default: $POD_IP or 127.0.0.1)",
    )
    parser.add_argument(
        "--metrics-port",
        type=int,
        default=_DEFAULT_METRICS_PORT,
        help=f"port of /metrics, 0 to disable (default: {_DEFAULT_METRICS_PORT})",
    )
    parser.add_argument(
        "--health-port",
        type=int,
        default=_DEFAULT_HEALTH_PORT,
        help=f"port of the kopf liveness endpoint /healthz, 0 to disable "
        f"(default: {_DEFAULT_HEALTH_PORT})",
    )
    parser.add_argument(
        "--disable-controller",
        action="append",
        default=[],
        metavar="MODULE",
        help="do not load this handler module of infergate.controllers (repeatable), e.g. "
        "paritycheck when something else writes ParityCheck verdicts",
    )
    parser.add_argument(
        "--allow-host-path",
        action="append",
        default=[],
        metavar="DIR",
        help="a node directory file:// models may name (repeatable); none: file:// models "
        "are refused",
    )
    parser.add_argument(
        "--runner-api-server",
        action="append",
        default=[],
        metavar="CIDR:PORT",
        help="an API server address the runners' NetworkPolicy allows besides the kubernetes "
        "Service ($KUBERNETES_SERVICE_HOST:PORT), e.g. 10.0.0.10/32:6443 where the network "
        "plugin matches policies after Service translation (repeatable)",
    )
    parser.add_argument(
        "--leader-election",
        action="store_true",
        help="act only while holding the Lease infergate-operator in $POD_NAMESPACE "
        "(for several replicas)",
    )
    parser.add_argument(
        "--lease-seconds",
        type=int,
        default=DEFAULT_TIMING.lease_seconds,
        help="how long a Lease not renewed keeps followers waiting (default: "
        f"{DEFAULT_TIMING.lease_seconds}); must exceed --renew-deadline-seconds plus the "
        f"longest write request ({DEFAULT_TIMING.write_request.longest:g}s)",
    )
    parser.add_argument(
        "--renew-deadline-seconds",
        type=float,
        default=DEFAULT_TIMING.renew_deadline_seconds,
        help="how long after its last renewal a leader that cannot renew still acts, then "
        f"stops (default: {DEFAULT_TIMING.renew_deadline_seconds:g}); must exceed the "
        f"longest Lease request ({DEFAULT_TIMING.lease_request.longest:g}s)",
    )
    parser.add_argument(
        "--golden-config",
        default=None,
        metavar="FILE|JSON",
        help="keep golden records of every Passed check in this store: a YAML/JSON file (or "
        "inline JSON) with store: {pvc: {claimName}} or {s3: {endpoint, bucket, prefix, "
        "secretRef}}, hiddenStates, maxBytes, sketchDimensions; the claim or Secret must "
        "exist in the runner namespace (--runner-namespace), where the runner Jobs run and "
        "tenants cannot read it or write records. Default: no golden records",
    )
    parser.add_argument(
        "--runner-namespace",
        default=None,
        metavar="NAMESPACE",
        help="where ParityCheck runner Jobs and their ServiceAccounts run: a namespace no "
        "tenant may write to (default: $POD_NAMESPACE, the operator's own, else "
        "infergate-system)",
    )
    parser.add_argument(
        "--image-pull-secret",
        action="append",
        default=[],
        metavar="NAME",
        help="a Secret (kubernetes.io/dockerconfigjson) the pods of infergate's own image pull "
        "it with (repeatable): runner Jobs and their ServiceAccounts, in the runner namespace, "
        "and probe pods and mirrors, in the served namespaces; the Secret must exist where "
        "each runs. Engine pods take theirs from spec.placement.imagePullSecrets",
    )
    parser.add_argument(
        "--runner-service-account-annotation",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="an annotation of every runner ServiceAccount (repeatable), e.g. "
        "eks.amazonaws.com/role-arn=arn:aws:iam::111122223333:role/golden for a golden "
        "store with credentials: Environment under IRSA",
    )
    parser.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    parser.set_defaults(handler=run_operator)


_NAME = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_ANNOTATION_KEY = re.compile(
    r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?"
    r"[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$"
)


def pull_secret_names(values: list[str]) -> tuple[str, ...]:
    """`--image-pull-secret` values, checked as object names, each once."""
    for value in values:
        if len(value) > 253 or not _NAME.fullmatch(value):
            raise ValueError(
                f"{value!r} is not a Secret name (lower-case letters, digits, '-' and '.')"
            )
    return tuple(dict.fromkeys(values))


def account_annotations(values: list[str]) -> dict[str, str]:
    """`--runner-service-account-annotation KEY=VALUE` values, keys checked as annotation keys."""
    annotations: dict[str, str] = {}
    for value in values:
        key, separator, text = value.partition("=")
        prefix, _, name = key.rpartition("/")
        if (
            not separator
            or len(prefix) > 253
            or len(name) > 63
            or not _ANNOTATION_KEY.fullmatch(key)
        ):
            raise ValueError(
                f"{value!r} is not KEY=VALUE with an annotation key, e.g. "
                "eks.amazonaws.com/role-arn=arn:aws:iam::111122223333:role/golden"
            )
        annotations[key] = text
    return annotations


def load_golden_config(value: str) -> GoldenSpec:
    """The operator's golden settings from a file (YAML or JSON) or inline JSON."""
    text = value if value.lstrip().startswith("{") else Path(value).read_text(encoding="utf-8")
    document = yaml.safe_load(text)
    return GoldenSpec.model_validate(document)


def watched_namespaces(patterns: list[str], runner_namespace: str) -> list[str]:
    """What kopf watches given `--namespace` patterns: those and the runner namespace (its
    runner Jobs are children too); none (every namespace) without patterns."""
    if not patterns or runner_namespace in patterns:
        return list(patterns)
    return [*patterns, runner_namespace]


def runner_namespace_refusal(patterns: list[str], runner_namespace: str) -> str | None:
    """Why the runner namespace cannot be one the operator serves checks in, if it is."""
    if runner_namespace in patterns:
        return (
            f"--runner-namespace: {runner_namespace} is also watched with --namespace; runner "
            "Jobs must run where no tenant may write or mint tokens: give a namespace of "
            "their own (default: the operator's)"
        )
    return None


def run_operator(args: argparse.Namespace) -> int:
    """Load the handlers and run kopf until interrupted; then end the process (refused
    options return their exit code)."""
    # Imported here: the other subcommands must not pay for kopf and the API client.
    import kopf

    from infergate import metrics
    from infergate.controllers import load_handlers
    from infergate.controllers._context import OPTIONS
    from infergate.controllers._leader import LEADER

    refused = _set_options(args)
    if refused:
        print(refused)
        return 2
    kopf.configure(verbose=args.verbose)
    if not args.verbose:
        # kopf reports every handler call at INFO; keep its warnings and our own messages.
        logging.getLogger("kopf.objects").setLevel(logging.WARNING)
    try:
        loaded = load_handlers(exclude=args.disable_controller)
    except ValueError as error:
        print(f"--disable-controller: {error}")
        return 2
    logging.getLogger("infergate").info("handler modules: %s", ", ".join(loaded))
    if args.metrics_port:
        metrics.serve(args.bind_address, args.metrics_port)
    liveness = (
        f"http://{args.bind_address}:{args.health_port}/healthz" if args.health_port else None
    )
    # A loop of our own: asyncio.run (kopf's default) would wait, without a bound, for
    # every thread of the default executor to finish its call before returning.
    kopf.run(
        loop=asyncio.new_event_loop(),
        standalone=True,
        clusterwide=not args.namespace,
        namespaces=watched_namespaces(args.namespace, OPTIONS.runner_namespace),
        liveness_endpoint=liveness,
        stop_flag=LEADER.stop,
        # /readyz answers 200 from here on (kopf raises it once the startup handlers ran).
        ready_flag=metrics.READY,
    )
    metrics.READY.clear()
    code = 0
    if LEADER.stop.is_set():
        print("leadership lost: exiting to restart as a follower")
        code = 1
    return end_process(code)


def end_process(code: int) -> NoReturn:
    """End the process now that kopf has stopped, whatever threads are still running.

    kopf's cleanup handlers have run (the Lease is released, the API client closed).
    What can remain are worker threads (kopf's executor, the reconcile and write pools)
    inside a blocking API call: up to the 60 s request timeout, or a watch far longer.
    Python joins such threads at exit, so a stopped operator lingered for minutes past
    its pod's grace period. What they were doing is abandoned, as under SIGKILL: every
    write is guarded by a resourceVersion and every reconcile starts from what it
    observes, so the next process redoes it.
    """
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def _set_options(args: argparse.Namespace) -> str | None:
    """Check the flags and set the operator's options; a refusal says which flag and why."""
    from infergate.controllers._context import OPTIONS
    from infergate.controllers._leader import LEADER
    from infergate.plan.leadership import timing_refusal
    from infergate.render.check_names import DEFAULT_RUNNER_NAMESPACE
    from infergate.render.images import DEFAULT_RUNNER_IMAGE, RUNNER_IMAGE_ENV
    from infergate.render.network import api_server_peers

    if args.resync_seconds <= 0:
        return f"--resync-seconds: {args.resync_seconds} is not allowed; give a positive number"
    if args.kubeconfig:
        # kopf's own login reads the same file.
        os.environ["KUBECONFIG"] = args.kubeconfig
    OPTIONS.resync_seconds = args.resync_seconds
    OPTIONS.kubeconfig = args.kubeconfig
    OPTIONS.runner_image = os.environ.get(RUNNER_IMAGE_ENV) or DEFAULT_RUNNER_IMAGE
    OPTIONS.runner_namespace = (
        args.runner_namespace or os.environ.get("POD_NAMESPACE") or DEFAULT_RUNNER_NAMESPACE
    )
    refused = runner_namespace_refusal(args.namespace, OPTIONS.runner_namespace)
    if refused:
        return refused
    bad = [d for d in args.allow_host_path if not d.startswith("/")]
    if bad:
        return f"--allow-host-path: {', '.join(bad)}: give absolute directories, e.g. /models"
    OPTIONS.allowed_host_paths = tuple(args.allow_host_path)
    OPTIONS.exact_namespaces = bool(args.namespace) and not any(
        set(pattern) & set("*?[]!") for pattern in args.namespace
    )
    refused = _runner_options(args, OPTIONS)
    if refused:
        return refused
    try:
        OPTIONS.runner_api_server = api_server_peers(
            os.environ.get("KUBERNETES_SERVICE_HOST"),
            os.environ.get("KUBERNETES_SERVICE_PORT"),
            args.runner_api_server,
        )
    except ValueError as error:
        return f"--runner-api-server: {error}"
    if args.leader_election:
        namespace = os.environ.get("POD_NAMESPACE")
        if not namespace:
            return "--leader-election: set POD_NAMESPACE (the Lease lives in that namespace)"
        # The renewal deadline and every request timeout must fence the leader's writes.
        timing = replace(
            LEADER.timing,
            lease_seconds=args.lease_seconds,
            renew_deadline_seconds=args.renew_deadline_seconds,
        )
        refused = timing_refusal(timing)
        if refused:
            return refused
        OPTIONS.leader_election = True
        OPTIONS.namespace = namespace
        # One identity per process (pod name and a random part, as kube-controller-manager
        # names itself): a restarted container is a new candidate, never the old holder.
        pod = os.environ.get("POD_NAME") or socket.gethostname()
        LEADER.identity = f"{pod}_{uuid.uuid4().hex[:8]}"
        LEADER.timing = timing
        LEADER.follow()  # nothing acts before the Lease is held
    return None


def _runner_options(args: argparse.Namespace, options: Any) -> str | None:
    """The golden store, pull secrets and runner account annotations; a refusal names the flag."""
    if args.golden_config:
        try:
            options.golden = load_golden_config(args.golden_config)
        except (OSError, yaml.YAMLError, ValidationError) as err:
            return f"--golden-config: {err}"
    try:
        options.image_pull_secrets = pull_secret_names(args.image_pull_secret)
    except ValueError as error:
        return f"--image-pull-secret: {error}"
    try:
        options.runner_account_annotations = account_annotations(
            args.runner_service_account_annotation
        )
    except ValueError as error:
        return f"--runner-service-account-annotation: {error}"
    return None
