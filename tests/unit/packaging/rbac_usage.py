"""What the operator asks of the API server, derived from its code, for the RBAC tests.

Four sources, each read from the code rather than kept as a list by hand:

- `infergate.kube` (the only package that talks to the API server): every call of a
  `KubeClient` verb method (`get`, `list`, `create`, `merge_patch`, `replace_status`,
  `delete`, `request`) on `self.client`/`self.kube`, with the `Resource` it is given
  resolved through constants, mappings, loop tuples and the callers of helper methods;
- `infergate.controllers`: each kopf decorator's resource (kopf lists and watches it;
  handlers that keep state or run as timers/daemons also patch it, for kopf's
  annotations and finalizer), `kopf.event` calls (Events), and what kopf itself needs
  (CRDs; namespaces when `kopf.run` gets namespace patterns);
- owner references with `blockOwnerDeletion` written by code the controllers import
  (the API server then wants `update` on the owner's `finalizers` subresource);
- the runner's Role as `runner_rbac` builds it, and the mirror's as `mirror_rbac` does:
  RBAC lets the operator grant only permissions it holds itself.

A call whose resource cannot be resolved is reported as such: the scanner must be
extended, not the list silently shortened.
"""

from __future__ import annotations

import ast
import importlib
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from infergate.kube.client import BY_KIND, Resource
from tests.unit.packaging.lockfiles import REPO

SOURCE_ROOT = REPO / "operator"
PACKAGE = "infergate"
_VERB_METHODS = {
    "get": "get",
    "list": "list",
    "create": "create",
    "merge_patch": "patch",
    "strategic_patch": "patch",
    "replace_status": "update",
    "replace": "update",
    "delete": "delete",
}
_HTTP_VERBS = {"POST": "create", "PATCH": "patch", "PUT": "update", "DELETE": "delete"}
_RECEIVERS = {"client", "kube"}
# kopf decorators whose handlers keep state on the object (progress annotations,
# finalizers): kopf patches the object for them. Timers and daemons add a finalizer
# (kopf's `requires_finalizer=True`); a delete handler does unless `optional=True`.
_STATEFUL = {"create", "update", "resume", "field", "timer", "daemon"}
_KOPF_EVENT_FUNCTIONS = {"event", "info", "warn", "exception"}


@dataclass(frozen=True, order=True)
class Permission:
    """One RBAC permission: verb on resource (with `/subresource`) of an API group."""

    group: str
    resource: str
    verb: str

    def __str__(self) -> str:
        group = self.group or "core"
        return f"{self.verb} {group}/{self.resource}"


@dataclass(frozen=True)
class Need:
    """A permission the code needs, and where that need comes from."""

    permission: Permission
    why: str


@dataclass(frozen=True)
class Unresolved:
    """A call the scanner could not resolve to a resource."""

    where: str
    expression: str


@dataclass(frozen=True)
class _Module:
    name: str
    path: Path
    tree: ast.Module
    module: Any

    def where(self, node: ast.AST) -> str:
        return f"{self.path.relative_to(SOURCE_ROOT)}:{getattr(node, 'lineno', 0)}"


def _load(name: str) -> _Module:
    module = importlib.import_module(name)
    path = Path(module.__file__ or "")
    return _Module(name, path, ast.parse(path.read_text(encoding="utf-8")), module)


def _package_modules(package: str) -> list[_Module]:
    directory = SOURCE_ROOT / package.replace(".", "/")
    names = sorted(p.stem for p in directory.glob("*.py") if p.stem != "__init__")
    return [_load(f"{package}.{name}") for name in names]


def _resources(value: Any) -> set[Resource] | None:
    """The Resources a runtime value stands for (itself, a mapping's values, a tuple's)."""
    if isinstance(value, Resource):
        return {value}
    if (
        isinstance(value, Mapping)
        and value
        and all(isinstance(v, Resource) for v in value.values())
    ):
        return set(value.values())
    if isinstance(value, tuple) and value and all(isinstance(v, Resource) for v in value):
        return set(value)
    return None


def _parents(tree: ast.AST) -> dict[ast.AST, ast.AST]:
    return {child: node for node in ast.walk(tree) for child in ast.iter_child_nodes(node)}


def _enclosing_function(
    node: ast.AST, parents: Mapping[ast.AST, ast.AST]
) -> ast.FunctionDef | ast.AsyncFunctionDef | None:
    current = parents.get(node)
    while current is not None and not isinstance(current, ast.FunctionDef | ast.AsyncFunctionDef):
        current = parents.get(current)
    return current


class _Resolver:
    """Resolves resource expressions in the kube package, across helper-method calls."""

    def __init__(self, modules: list[_Module], callers: list[_Module]) -> None:
        self.modules = modules
        self.callers = callers
        self.parents = {m.name: _parents(m.tree) for m in {*modules, *callers}}
        self.unresolved: list[Unresolved] = []

    def resolve(
        self, expr: ast.expr, module: _Module, depth: int = 0
    ) -> tuple[set[Resource], bool]:
        """(candidates, exact): exact is False for a mapping indexed by a runtime value."""
        if isinstance(expr, ast.Name):
            found = _resources(getattr(module.module, expr.id, None))
            if found is not None:
                return found, len(found) == 1
            return self._local(expr, module, depth)
        if isinstance(expr, ast.Attribute) and isinstance(expr.value, ast.Name):
            owner = getattr(module.module, expr.value.id, None)
            found = _resources(getattr(owner, expr.attr, None))
            if found is not None:
                return found, len(found) == 1
        if isinstance(expr, ast.Subscript):
            mapping = getattr(module.module, getattr(expr.value, "id", ""), None)
            if isinstance(mapping, Mapping):
                key = self._constant_key(expr.slice, module)
                if key is not None and isinstance(mapping.get(key), Resource):
                    return {mapping[key]}, True
                found = _resources(mapping)
                if found is not None:
                    return found, False
        raise _Unresolvable(expr)

    def _constant_key(self, expr: ast.expr, module: _Module) -> str | None:
        if isinstance(expr, ast.Constant) and isinstance(expr.value, str):
            return expr.value
        if isinstance(expr, ast.Attribute) and isinstance(expr.value, ast.Name):
            value = getattr(getattr(module.module, expr.value.id, None), expr.attr, None)
            return value if isinstance(value, str) else None
        return None

    def _local(self, name: ast.Name, module: _Module, depth: int) -> tuple[set[Resource], bool]:
        function = _enclosing_function(name, self.parents[module.name])
        if function is None or depth > 4:
            raise _Unresolvable(name)
        for node in ast.walk(function):
            # for resource in (PODS, SERVICES, ...):
            if (
                isinstance(node, ast.For)
                and isinstance(node.target, ast.Name)
                and node.target.id == name.id
                and isinstance(node.iter, ast.Tuple | ast.List)
            ):
                return self._union((e, module) for e in node.iter.elts)
            # an assignment to the name, e.g. from another constant
            if isinstance(node, ast.Assign) and any(
                isinstance(t, ast.Name) and t.id == name.id for t in node.targets
            ):
                return self.resolve(node.value, module, depth + 1)
        parameters = [a.arg for a in function.args.args]
        if name.id in parameters:
            return self._from_callers(function.name, parameters.index(name.id), depth)
        raise _Unresolvable(name)

    def _from_callers(self, function: str, index: int, depth: int) -> tuple[set[Resource], bool]:
        """A parameter: the union of what every caller passes (methods: `self` is index 0)."""
        arguments: list[tuple[ast.expr, _Module]] = []
        for module in self.callers:
            for node in ast.walk(module.tree):
                if not isinstance(node, ast.Call):
                    continue
                callee = node.func
                is_method = isinstance(callee, ast.Attribute) and callee.attr == function
                is_function = isinstance(callee, ast.Name) and callee.id == function
                position = index - 1 if is_method else index
                if (is_method or is_function) and 0 <= position < len(node.args):
                    arguments.append((node.args[position], module))
        if not arguments:
            raise _Unresolvable(ast.Name(id=f"<parameter {index} of {function}>"))
        return self._union(arguments, depth + 1)

    def _union(
        self, items: Iterable[tuple[ast.expr, _Module]], depth: int = 0
    ) -> tuple[set[Resource], bool]:
        found: set[Resource] = set()
        exact = True
        for expr, module in items:
            resources, this_exact = self.resolve(expr, module, depth)
            found |= resources
            exact = exact and this_exact
        return found, exact


class _Unresolvable(Exception):  # noqa: N818 - a control-flow signal inside the resolver
    def __init__(self, expr: ast.AST) -> None:
        super().__init__(ast.unparse(expr))


def _receiver_is_client(node: ast.Call) -> bool:
    func = node.func
    if not isinstance(func, ast.Attribute):
        return False
    receiver = func.value
    if isinstance(receiver, ast.Attribute):
        return receiver.attr.lstrip("_") in _RECEIVERS
    return isinstance(receiver, ast.Name) and receiver.id in _RECEIVERS


def _subresource(call: ast.Call) -> str | None:
    for keyword in call.keywords:
        if keyword.arg == "subresource" and isinstance(keyword.value, ast.Constant):
            return str(keyword.value.value)
    return None


@dataclass(frozen=True)
class ApiUse:
    """A KubeClient call site: its verb and the resources it may address."""

    where: str
    verb: str
    resources: frozenset[Resource]
    subresource: str | None
    exact: bool

    def permissions(self) -> set[Permission]:
        suffix = f"/{self.subresource}" if self.subresource else ""
        return {Permission(r.group, r.plural + suffix, self.verb) for r in self.resources}


def kube_calls(within: set[str] | None = None) -> tuple[list[ApiUse], list[Unresolved]]:
    """Every KubeClient call in `infergate.kube` (the modules in `within`), resolved."""
    modules = [
        m
        for m in _package_modules(f"{PACKAGE}.kube")
        if m.name != f"{PACKAGE}.kube.client" and (within is None or m.name in within)
    ]
    callers = [*modules, *_package_modules(f"{PACKAGE}.controllers")]
    resolver = _Resolver(modules, callers)
    uses: list[ApiUse] = []
    unresolved: list[Unresolved] = []
    for module in modules:
        for node in ast.walk(module.tree):
            if not (isinstance(node, ast.Call) and _receiver_is_client(node)):
                continue
            method = node.func.attr  # type: ignore[attr-defined]
            try:
                use = _api_use(node, method, module, resolver)
            except _Unresolvable as error:
                unresolved.append(Unresolved(module.where(node), str(error)))
                continue
            if use is not None:
                uses.append(use)
    return uses, unresolved


def _api_use(node: ast.Call, method: str, module: _Module, resolver: _Resolver) -> ApiUse | None:
    where = module.where(node)
    if method in _VERB_METHODS and node.args:
        resources, exact = resolver.resolve(node.args[0], module)
        subresource = "status" if method == "replace_status" else _subresource(node)
        return ApiUse(where, _VERB_METHODS[method], frozenset(resources), subresource, exact)
    if method == "request" and len(node.args) >= 2:
        http_verb, path = node.args[0], node.args[1]
        if not (isinstance(http_verb, ast.Constant) and isinstance(path, ast.Call)):
            raise _Unresolvable(node)
        path_func = path.func
        if not (isinstance(path_func, ast.Attribute) and path_func.attr == "path"):
            raise _Unresolvable(path)
        resources, exact = resolver.resolve(path_func.value, module)
        named = len(path.args) >= 2
        subresource = None
        if len(path.args) >= 3 and isinstance(path.args[2], ast.Constant):
            subresource = str(path.args[2].value)
        verb = str(http_verb.value).upper()
        rbac_verb = ("get" if named else "list") if verb == "GET" else _HTTP_VERBS[verb]
        return ApiUse(where, rbac_verb, frozenset(resources), subresource, exact)
    return None


def _decorator_resource(call: ast.Call, module: _Module) -> tuple[str, str] | None:
    """(group, plural) of a kopf decorator given as (group, version, plural) or *TUPLE."""
    values: list[Any] = []
    for arg in call.args:
        if isinstance(arg, ast.Starred) and isinstance(arg.value, ast.Name):
            values += list(getattr(module.module, arg.value.id))
        elif isinstance(arg, ast.Constant):
            values.append(arg.value)
        elif isinstance(arg, ast.Name):
            values.append(getattr(module.module, arg.id))
        else:
            raise _Unresolvable(arg)
    if len(values) == 3:
        return str(values[0]), str(values[2])
    return None


def _kopf_parts(node: ast.expr) -> list[str] | None:
    """['on', 'create'] for `kopf.on.create`, ['timer'] for `kopf.timer`, else None."""
    parts: list[str] = []
    while isinstance(node, ast.Attribute):
        parts.insert(0, node.attr)
        node = node.value
    return parts if isinstance(node, ast.Name) and node.id == "kopf" else None


def kopf_needs(handlers: Iterable[str]) -> tuple[list[Need], list[Unresolved]]:
    """What kopf does for the given handler modules of `infergate.controllers`, and itself."""
    needs: list[Need] = []
    unresolved: list[Unresolved] = []
    for module in [_load(name) for name in handlers]:
        for node in ast.walk(module.tree):
            if not isinstance(node, ast.Call):
                continue
            parts = _kopf_parts(node.func)
            if parts is None:
                continue
            where = module.where(node)
            if parts[-1] in _KOPF_EVENT_FUNCTIONS and len(parts) == 1:
                needs.append(Need(Permission("", "events", "create"), f"{where}: kopf.{parts[0]}"))
                continue
            kind = parts[-1]
            if not ((parts[0] == "on" and len(parts) == 2) or kind in {"timer", "daemon", "index"}):
                continue
            try:
                resource = _decorator_resource(node, module)
            except _Unresolvable as error:
                unresolved.append(Unresolved(where, str(error)))
                continue
            if resource is None:
                continue
            group, plural = resource
            label = f"{where}: kopf.{'.'.join(parts)}"
            needs += [Need(Permission(group, plural, v), label) for v in ("list", "watch")]
            optional = any(
                k.arg == "optional" and isinstance(k.value, ast.Constant) and k.value.value
                for k in node.keywords
            )
            if kind in _STATEFUL or (kind == "delete" and not optional):
                needs.append(Need(Permission(group, plural, "patch"), f"{label} (kopf state)"))
    needs += _kopf_itself()
    return needs, unresolved


def _kopf_itself() -> list[Need]:
    """kopf discovers served resources from CRDs; namespace patterns need namespaces."""
    crds = [
        Need(Permission("apiextensions.k8s.io", "customresourcedefinitions", verb), "kopf scanning")
        for verb in ("list", "watch")
    ]
    operator = _load(f"{PACKAGE}.commands.operator")
    for node in ast.walk(operator.tree):
        if (
            isinstance(node, ast.Call)
            and _kopf_parts(node.func) == ["run"]
            and any(k.arg == "namespaces" for k in node.keywords)
        ):
            where = f"{operator.where(node)}: kopf.run(namespaces=...)"
            crds += [Need(Permission("", "namespaces", v), where) for v in ("list", "watch")]
    return crds


def _import_closure(roots: Iterable[str]) -> list[_Module]:
    seen: dict[str, _Module] = {}
    todo = list(roots)
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        try:
            module = _load(name)
        except ModuleNotFoundError:
            continue
        if not module.path.is_relative_to(SOURCE_ROOT):
            continue
        seen[name] = module
        for node in ast.walk(module.tree):
            if (
                isinstance(node, ast.ImportFrom)
                and node.module
                and node.level == 0
                and node.module.startswith(PACKAGE)
            ):
                todo.append(node.module)
                todo += [f"{node.module}.{alias.name}" for alias in node.names]
    return list(seen.values())


def owner_finalizer_needs(closure: Iterable[_Module]) -> list[Need]:
    """`update` on OWNER/finalizers for every blockOwnerDeletion the controllers write."""
    needs = []
    for module in closure:
        for node in ast.walk(module.tree):
            if not isinstance(node, ast.Dict):
                continue
            entries = {
                k.value: v
                for k, v in zip(node.keys, node.values, strict=True)
                if isinstance(k, ast.Constant)
            }
            block = entries.get("blockOwnerDeletion")
            if not (isinstance(block, ast.Constant) and block.value is True):
                continue
            kind_node = entries.get("kind")
            kind = str(
                kind_node.value
                if isinstance(kind_node, ast.Constant)
                else getattr(module.module, getattr(kind_node, "id", ""), None)
            )
            resource = BY_KIND[kind]
            permission = Permission(resource.group, f"{resource.plural}/finalizers", "update")
            needs.append(Need(permission, f"{module.where(node)}: blockOwnerDeletion on {kind}"))
    return needs


def runner_role_needs() -> list[Need]:
    """The runner Role's rules: the operator must hold what it grants."""
    from infergate.render.check_children import runner_rbac

    check = {"metadata": {"name": "check", "namespace": "ns", "uid": "uid"}}
    objects = runner_rbac(
        check,
        runner_namespace="runners",
        deployments=["d"],
        services=["s"],
        config_maps=["c"],
        list_deployments=True,
    )
    role = next(o for o in objects if o["kind"] == "Role")
    needs = []
    for rule in role["rules"]:
        for group in rule["apiGroups"]:
            for resource in rule["resources"]:
                for verb in rule["verbs"]:
                    needs.append(Need(Permission(group, resource, verb), "runner Role (granted)"))
    return needs


def mirror_role_needs() -> list[Need]:
    """The mirror Role's rules: the operator must hold what it grants."""
    from infergate.render.mirror import mirror_rbac

    role = next(o for o in mirror_rbac("d", "ns") if o["kind"] == "Role")
    return [
        Need(Permission(group, resource, verb), "mirror Role (granted)")
        for rule in role["rules"]
        for group in rule["apiGroups"]
        for resource in rule["resources"]
        for verb in rule["verbs"]
    ]


@dataclass(frozen=True)
class OperatorUsage:
    """Everything the operator needs with a set of handler modules loaded."""

    handlers: tuple[str, ...]
    exact: list[Need]
    dynamic: list[ApiUse]
    unresolved: list[Unresolved]

    def permissions(self) -> set[Permission]:
        """Permissions exact call sites need."""
        return {need.permission for need in self.exact}

    def reachable(self) -> set[Permission]:
        """Exact needs plus every candidate of the dynamic call sites."""
        found = self.permissions()
        for use in self.dynamic:
            found |= use.permissions()
        return found

    def why(self, permission: Permission) -> list[str]:
        return [need.why for need in self.exact if need.permission == permission]


def handler_modules() -> list[str]:
    """The operator's handler modules, as `infergate operator` loads them."""
    from infergate.controllers import handler_modules as names

    return [f"{PACKAGE}.controllers.{name}" for name in names()]


def operator_usage(disabled: Iterable[str] = ()) -> OperatorUsage:
    """What `infergate operator --disable-controller ...` (each of `disabled`) needs."""
    skip = {f"{PACKAGE}.controllers.{name}" for name in disabled}
    handlers = [name for name in handler_modules() if name not in skip]
    closure = _import_closure(handlers)
    names = {module.name for module in closure}
    uses, unresolved = kube_calls(names)
    kopf, kopf_unresolved = kopf_needs(handlers)
    exact = [
        Need(permission, f"{use.where}: {use.verb}")
        for use in uses
        if use.exact
        for permission in use.permissions()
    ]
    exact += kopf + owner_finalizer_needs(closure)
    if f"{PACKAGE}.render.check_children" in names:
        exact += runner_role_needs()
    if f"{PACKAGE}.render.mirror" in names:
        exact += mirror_role_needs()
    dynamic = [use for use in uses if not use.exact]
    return OperatorUsage(tuple(handlers), exact, dynamic, [*unresolved, *kopf_unresolved])


def grants(rules: Iterable[Mapping[str, Any]], permission: Permission) -> bool:
    """Whether any rule (without resourceNames) grants the permission."""
    for rule in rules:
        if rule.get("resourceNames") or rule.get("nonResourceURLs"):
            continue
        if not _matches(rule.get("apiGroups", []), permission.group):
            continue
        if not _matches(rule.get("resources", []), permission.resource):
            continue
        if _matches(rule.get("verbs", []), permission.verb):
            return True
    return False


def _matches(allowed: Iterable[str], value: str) -> bool:
    return any(item in ("*", value) for item in allowed)


def rule_label(rule: Mapping[str, Any]) -> str:
    groups = ",".join(g or "core" for g in rule.get("apiGroups", []))
    return f"{groups}/{','.join(rule.get('resources', []))}:{','.join(rule.get('verbs', []))}"


def iter_rule_permissions(rule: Mapping[str, Any]) -> Iterator[Permission]:
    for group in rule.get("apiGroups", []):
        for resource in rule.get("resources", []):
            for verb in rule.get("verbs", []):
                yield Permission(group, resource, verb)
