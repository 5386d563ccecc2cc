"""What `pulumi up` would register for a stack, recorded without the Pulumi CLI or a cloud account.

`record(stack, root)` runs the real Pulumi program (`components.program.deploy`, what `__main__.py`
runs) under the SDK's mock runtime with the stack file's config, and returns a `Graph`: every
registered resource with its type, name, URN, parent, dependencies and inputs, the outputs each
component registered, and the stack outputs. Secret values are masked as "[secret]"; a secret's
placeholder showing up anywhere in plaintext — as itself, JSON-escaped, percent-encoded or in base64 —
is reported in `Graph.plaintext_secrets`.

The mock runtime is process-global state: `record` resets it before each run, so calls can follow
one another in one process (tests, the CLI) but must not run concurrently.
"""

from __future__ import annotations

import json
import re
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pulumi
import pulumi.runtime
from pulumi.runtime import rpc
from pulumi.runtime.mocks import MockCallArgs, MockMonitor, MockResourceArgs, Mocks
from pulumi.runtime.settings import SETTINGS, get_root_resource, reset_options
from pulumi.runtime.stack import run_pulumi_func
from pulumi.runtime.sync_await import _ensure_event_loop, _sync_await

from .leaks import carries
from .spec import PROJECT, load_stack

SECRET = "[secret]"
# What a `secure:` config value holds during a recording: never a real secret, and never printed.
SECRET_PLACEHOLDER = "<secret>"
_TYPE_TOKEN = re.compile(r"^[A-Za-z][-A-Za-z0-9_.]*:[-A-Za-z0-9_./]+:[A-Za-z_][-A-Za-z0-9_.]*$")
STACK_TYPE = "pulumi:pulumi:Stack"


class GraphError(Exception):
    """The program did not register a valid graph (bad input, a missing extra, a broken program)."""


@dataclass(frozen=True)
class Resource:
    """One registered resource, as the engine would receive it."""

    type: str
    name: str
    urn: str
    parent: str | None  # URN of the component it belongs to; None at the top level
    custom: bool
    dependencies: tuple[str, ...]
    property_dependencies: dict[str, tuple[str, ...]]
    inputs: dict[str, Any]
    outputs: dict[str, Any] | None = None  # what a component passed to register_outputs

    def to_json(self) -> dict[str, Any]:
        return {
            "type": self.type,
            "name": self.name,
            "urn": self.urn,
            "parent": self.parent,
            "custom": self.custom,
            "dependencies": list(self.dependencies),
            "propertyDependencies": {k: list(v) for k, v in self.property_dependencies.items()},
            "inputs": self.inputs,
            "outputs": self.outputs,
        }


@dataclass(frozen=True)
class Graph:
    """The resources a stack registers, sorted by URN, and its stack outputs."""

    stack: str
    resources: tuple[Resource, ...]
    outputs: dict[str, Any]
    plaintext_secrets: tuple[str, ...] = field(default=())  # "<urn> <input path>" where a secret leaked

    def __getitem__(self, urn: str) -> Resource:
        for resource in self.resources:
            if resource.urn == urn:
                return resource
        raise KeyError(urn)

    def of_type(self, type_: str) -> list[Resource]:
        """Resources of one type token, e.g. `aws:eks/nodeGroup:NodeGroup`."""
        return [r for r in self.resources if r.type == type_]

    def named(self, type_: str, name: str) -> Resource:
        """The one resource of this type and name; KeyError naming what exists otherwise."""
        found = [r for r in self.of_type(type_) if r.name == name]
        if len(found) != 1:
            names = ", ".join(r.name for r in self.of_type(type_)) or "none"
            raise KeyError(f"{type_} {name!r}: {len(found)} registered (names of that type: {names})")
        return found[0]

    def children(self, urn: str) -> list[Resource]:
        return [r for r in self.resources if r.parent == urn]

    def descendants(self, urn: str) -> list[Resource]:
        out: list[Resource] = []
        for child in self.children(urn):
            out += [child, *self.descendants(child.urn)]
        return out

    def upstream(self, urn: str, *, through_parents: bool = False) -> set[str]:
        """Every URN `urn` waits for, transitively, along dependencies and property dependencies.

        With `through_parents`, a resource also waits for what its ancestors depend on (that gates
        creation; `pulumi destroy` ordering follows the explicit edges only).
        """
        known = {r.urn: r for r in self.resources}
        seen: set[str] = set()
        todo = [urn]
        while todo:
            current = known.get(todo.pop())
            if current is None:
                continue
            edges = [*current.dependencies, *(u for us in current.property_dependencies.values() for u in us)]
            if through_parents and current.parent:
                edges.append(current.parent)
            for edge in edges:
                if edge not in seen:
                    seen.add(edge)
                    todo.append(edge)
        return seen

    def to_json(self) -> dict[str, Any]:
        return {
            "stack": self.stack,
            "resources": [r.to_json() for r in self.resources],
            "outputs": self.outputs,
        }

    def dumps(self) -> str:
        """Deterministic JSON (sorted keys): what `grpo-infra graph STACK --json` prints."""
        return json.dumps(self.to_json(), indent=2, sort_keys=True, default=str)


def record(stack: str, root: Path, program: Callable[[], None] | None = None) -> Graph:
    """Run `program` (default: the project's Pulumi program) for `stack` under mocks; return its graph.

    Config comes from `root/stacks/Pulumi.<stack>.yaml` exactly as the CLI would pass it, `secure:`
    values becoming Pulumi secrets holding a placeholder. Raises `SpecError` for a bad stack file and
    `GraphError` when the program fails (its message is the one `pulumi up` would print).
    """
    loaded = load_stack(stack, root)  # bad input: the same SpecError `synth` reports
    return record_file(stack, loaded.path, program)


def record_file(stack: str, path: Path, program: Callable[[], None] | None = None) -> Graph:
    """Run `program` on the config of the stack file at `path`, with no validation before the program's own.

    This is what `pulumi up` does: the CLI hands the file's config to the program, so the program must
    refuse a bad or infeasible stack by itself. Raises `GraphError` with the program's message.
    """
    config, secret_keys = stack_config(path)
    if program is None:
        from components.program import deploy

        program = deploy
    return _run(stack, config, secret_keys, program)


def stack_config(path: Path) -> tuple[dict[str, str], list[str]]:
    """The stack file's config as the CLI hands it to a program: strings, structured values as JSON."""
    import yaml

    document = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    config: dict[str, str] = {}
    secret_keys: list[str] = []
    for key, value in (document.get("config") or {}).items():
        if isinstance(value, dict) and set(value) == {"secure"}:
            config[key] = SECRET_PLACEHOLDER
            secret_keys.append(key)
        elif isinstance(value, str):
            config[key] = value
        else:
            config[key] = json.dumps(value)
    return config, secret_keys


class _EchoMocks(Mocks):
    """Every resource's state is its inputs; every invoke returns nothing."""

    def new_resource(self, args: MockResourceArgs) -> tuple[str | None, dict]:
        return f"{args.name}-id", dict(args.inputs)

    def call(self, args: MockCallArgs) -> tuple[dict, list[tuple[str, str]] | None]:
        return {}, None


class _RecordingMonitor(MockMonitor):
    """Records what each RegisterResource / RegisterResourceOutputs carried, and what is malformed."""

    def __init__(self, mocks: Mocks) -> None:
        super().__init__(mocks)
        self.lock = threading.Lock()
        self.registered: dict[str, dict[str, Any]] = {}
        self.component_outputs: dict[str, Any] = {}
        self.problems: list[str] = []

    def make_urn(self, parent: str, type_: str, name: str) -> str:
        """URNs as the engine makes them: the type chain of the parents, leaving out the root stack."""
        if parent and parent.split("::")[2] != STACK_TYPE:
            type_ = f"{parent.split('::')[2]}${type_}"
        return super().make_urn("", type_, name)

    def RegisterResource(self, request: Any) -> Any:
        urn = self.make_urn(request.parent, request.type, request.name)
        if request.type != STACK_TYPE:
            _ensure_event_loop()
            entry = {
                "type": request.type,
                "name": request.name,
                "urn": urn,
                "parent": request.parent or None,
                "custom": bool(request.custom),
                "dependencies": tuple(sorted(set(request.dependencies))),
                "property_dependencies": {
                    k: tuple(sorted(set(v.urns))) for k, v in sorted(request.propertyDependencies.items()) if v.urns
                },
                "inputs": rpc.deserialize_properties(request.object),
            }
            with self.lock:
                if not _TYPE_TOKEN.match(request.type):
                    self.problems.append(f"malformed type token {request.type!r} (expected package:module:Type)")
                if urn in self.registered:
                    self.problems.append(
                        f"duplicate URN {urn}: two resources of type {request.type} named {request.name!r}"
                    )
                self.registered[urn] = entry
        return super().RegisterResource(request)

    def RegisterResourceOutputs(self, request: Any) -> Any:
        _ensure_event_loop()
        outputs = rpc.deserialize_properties(request.outputs)
        with self.lock:
            self.component_outputs[request.urn] = outputs
        return super().RegisterResourceOutputs(request)


def _run(stack: str, config: dict[str, str], secret_keys: list[str], program: Callable[[], None]) -> Graph:
    _ensure_event_loop()
    reset_options(project=PROJECT, stack=stack, preview=False)
    pulumi.runtime.set_all_config(config, secret_keys)
    monitor = _RecordingMonitor(_EchoMocks())
    pulumi.runtime.set_mocks(monitor.mocks, project=PROJECT, stack=stack, preview=False, monitor=monitor)
    SETTINGS.rpc_manager.clear()
    SETTINGS.outputs.clear()
    exported: dict[str, Any] = {}

    def body() -> None:
        program()
        stack_resource = get_root_resource()
        for name, value in dict(getattr(stack_resource, "outputs", {})).items():
            output = pulumi.Output.from_input(value)
            resolved = _sync_await(output.future())
            exported[name] = SECRET if _sync_await(output.is_secret()) else resolved

    try:
        _sync_await(run_pulumi_func(body))
    except pulumi.RunError as exc:
        raise GraphError(str(exc)) from None
    if monitor.problems:
        raise GraphError("; ".join(sorted(set(monitor.problems))))

    leaks: list[str] = []
    resources = []
    stack_urn = f"urn:pulumi:{stack}::{PROJECT}::{STACK_TYPE}::{PROJECT}-{stack}"
    for urn, entry in sorted(monitor.registered.items()):
        if entry["parent"] == stack_urn:
            entry = {**entry, "parent": None}  # top-level: the stack itself is not listed
        inputs = _mask(entry["inputs"], urn, "", leaks)
        outputs = monitor.component_outputs.get(urn)
        resources.append(
            Resource(
                **{**entry, "inputs": inputs, "outputs": None if outputs is None else _mask(outputs, urn, "", leaks)}
            )
        )
    masked_exports = _mask(exported, "stack outputs", "", leaks)
    return Graph(stack=stack, resources=tuple(resources), outputs=masked_exports, plaintext_secrets=tuple(leaks))


def _mask(value: Any, urn: str, path: str, leaks: list[str]) -> Any:
    """Plain JSON-able data: secrets become "[secret]", resource references their URN."""
    if rpc.is_rpc_secret(value):
        return SECRET
    if isinstance(value, dict):
        return {str(k): _mask(v, urn, f"{path}.{k}" if path else str(k), leaks) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_mask(v, urn, f"{path}[{i}]", leaks) for i, v in enumerate(value)]
    if isinstance(value, pulumi.Resource):
        return f"<resource {type(value).__name__}>"
    if isinstance(value, str) and carries(value, SECRET_PLACEHOLDER):
        leaks.append(f"{urn} {path}")
        return SECRET
    if isinstance(value, float) and value.is_integer():
        return int(value)  # the wire format carries every number as a float
    if value is None or isinstance(value, (str, int, float, bool)):
        return value
    return str(value)


def walk(graph: Graph) -> Iterator[tuple[int, Resource]]:
    """Resources depth-first from the stack's top-level ones, with their depth: the tree to show."""
    urns = {r.urn for r in graph.resources}

    def visit(resource: Resource, depth: int) -> Iterator[tuple[int, Resource]]:
        yield depth, resource
        for child in sorted(graph.children(resource.urn), key=lambda r: (r.type, r.name)):
            yield from visit(child, depth + 1)

    for top in sorted((r for r in graph.resources if r.parent not in urns), key=lambda r: (r.type, r.name)):
        yield from visit(top, 0)
