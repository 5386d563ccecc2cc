"""Reading an environment from a Pulumi stack file, and saying clearly what is wrong with it.

The stack file is Pulumi's own `stacks/Pulumi.<stack>.yaml`; the environment is the structured
value of `grpo-infra:environment`, exactly what `pulumi.Config("grpo-infra").require_object`
returns under `pulumi up`. Secrets are separate top-level keys holding `secure:` values, named by
`job.secrets[].config`.
"""

from __future__ import annotations

import difflib
import re
import types
import typing
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ValidationError

from .environment import Environment
from .reading import StackFileRefusal, read_document, read_lock
from .strings import shown

PROJECT = "grpo-infra"
ENVIRONMENT_KEY = f"{PROJECT}:environment"
# Top-level keys Pulumi itself writes into a stack file.
_STACK_FILE_KEYS = {"config", "encryptionsalt", "secretsprovider", "encryptedkey", "environment"}


class SpecError(Exception):
    """Bad input: a stack that cannot be read or does not describe a valid environment."""

    def __init__(self, source: str, problems: Iterable[str]) -> None:
        self.source = source
        self.problems = list(problems)
        super().__init__(self.render())

    def render(self) -> str:
        """The refusal as printed: control and invisible characters of the input shown escaped."""
        source = shown(self.source)
        if len(self.problems) == 1:
            return f"{source}: {shown(self.problems[0])}"
        lines = [f"{source}: {len(self.problems)} problems"]
        lines += [f"  - {shown(p)}" for p in self.problems]
        return "\n".join(lines)


@dataclass(frozen=True)
class Stack:
    """A loaded stack: its name, file, environment and the names of its secret config keys."""

    name: str
    path: Path
    environment: Environment
    secret_keys: frozenset[str]


def stack_path(stack: str, root: Path) -> Path:
    return root / stack_source(stack)


def stack_source(stack: str) -> str:
    """The stack file as messages name it, relative to the project."""
    return f"stacks/Pulumi.{stack}.yaml"


def lock_source(stack: str) -> str:
    """The stack's image lock, relative to the project (written by `grpo-infra image lock STACK`)."""
    return f"stacks/locks/{stack}.txt"


def with_lock(env: Environment, root: Path, stack: str, source: str) -> Environment:
    """The environment with its image build's lock read from `stacks/locks/<stack>.txt` (None: no file).

    The lock is a file of its own, not a key of the stack file: setting `image.build.lock` there is refused.
    """
    build = env.image.build
    if build is None:
        return env
    if build.lock is not None:
        raise SpecError(source, [f"image.build.lock: not a stack setting; the lock is read from {lock_source(stack)}"])
    path = root / lock_source(stack)
    try:
        text = read_lock(path) if path.is_file() else None
    except StackFileRefusal as exc:
        raise SpecError(lock_source(stack), [exc.render()]) from None
    image = env.image.model_copy(update={"build": build.model_copy(update={"lock": text})})
    return env.model_copy(update={"image": image})


def list_stacks(root: Path) -> list[str]:
    """Stack names that have a file in `stacks/`, sorted."""
    return sorted(p.name[len("Pulumi.") : -len(".yaml")] for p in (root / "stacks").glob("Pulumi.*.yaml"))


# Pulumi's stack names: letters, digits, `-`, `_` and `.`; bounded well below a file name's 255 bytes.
_STACK_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]*")
MAX_STACK_NAME = 100


def check_stack_name(stack: str) -> None:
    """Refuse a stack name that is not one file name of a few characters, before it touches the file system.

    A name is part of a path: `/`, `..`, control characters or 300 characters would otherwise reach
    `open` (a traceback, or another file than the stack's)."""
    source = stack_source(stack if len(stack) <= MAX_STACK_NAME else f"{stack[:40]}…")
    if len(stack) > MAX_STACK_NAME:
        raise SpecError(source, [f"stack name is {len(stack)} characters; at most {MAX_STACK_NAME}"])
    if not _STACK_NAME.fullmatch(stack):
        raise SpecError(source, ["stack name: expected letters, digits, `-`, `_` and `.` (a Pulumi stack name)"])


def load_stack(stack: str, root: Path = Path()) -> Stack:
    """Read and validate `stacks/Pulumi.<stack>.yaml`; raise SpecError on any bad input."""
    check_stack_name(stack)
    path = stack_path(stack, root)
    source = str(path.relative_to(root)) if path.is_relative_to(root) else str(path)
    if not path.is_file():
        known = ", ".join(list_stacks(root)) or "none"
        raise SpecError(source, [f"no such stack {stack!r} (stacks here: {known})"])
    try:
        document = read_document(path)
    except StackFileRefusal as exc:
        raise SpecError(source, [exc.render()]) from None
    config = _stack_config(document, source)
    secret_keys = frozenset(k for k, v in config.items() if _is_secure(v))
    env = with_lock(environment_from_config(config, secret_keys, source), root, stack, source)
    return Stack(name=stack, path=path, environment=env, secret_keys=secret_keys)


def environment_from_config(config: Mapping[str, Any], secret_keys: Iterable[str], source: str) -> Environment:
    """Validate the environment in a stack's config map (file values, or what pulumi.Config holds).

    `secret_keys` are the full config keys (`grpo-infra:<key>`) that hold Pulumi secrets.
    """
    secret_keys = set(secret_keys)
    if ENVIRONMENT_KEY not in config:
        raise SpecError(source, [f"config has no `{ENVIRONMENT_KEY}` key (the environment this stack describes)"])
    raw = config[ENVIRONMENT_KEY]
    if ENVIRONMENT_KEY in secret_keys or _is_secure(raw):
        raise SpecError(source, [f"{ENVIRONMENT_KEY}: expected a plaintext mapping, got a secure: value"])
    if not isinstance(raw, dict):
        raise SpecError(source, [f"{ENVIRONMENT_KEY}: expected a mapping, got {_kind(raw)}"])
    nested = list(_secure_paths(raw, ENVIRONMENT_KEY))
    if nested:
        raise SpecError(
            source,
            [
                f"{p}: expected plaintext, got a secure: value (keep secrets in their own key and name it in job.secrets)"
                for p in nested
            ],
        )
    try:
        env = Environment.model_validate(raw)
    except ValidationError as exc:
        raise SpecError(source, [_describe(err) for err in exc.errors()]) from None
    problems = []
    for i, ref in enumerate(env.job.secrets):
        key = f"{PROJECT}:{ref.config}"
        where = f"{ENVIRONMENT_KEY}.job.secrets[{i}].config"
        if key not in config:
            problems.append(
                f"{where}: names `{key}`, which the stack does not set (pulumi config set --secret {ref.config})"
            )
        elif key not in secret_keys:
            problems.append(
                f"{where}: `{key}` is plaintext; expected a secure: value (pulumi config set --secret {ref.config})"
            )
    if problems:
        raise SpecError(source, problems)
    return env


def _stack_config(document: Any, source: str) -> dict[str, Any]:
    if not isinstance(document, dict):
        raise SpecError(source, [f"expected a Pulumi stack file (a mapping with `config:`), got {_kind(document)}"])
    unknown = sorted(set(document) - _STACK_FILE_KEYS, key=str)
    if unknown:
        raise SpecError(
            source, [f"unknown top-level key {unknown[0]!r}; expected {', '.join(sorted(_STACK_FILE_KEYS))}"]
        )
    config = document.get("config")
    if not isinstance(config, dict):
        raise SpecError(source, [f"`config` must be a mapping of Pulumi config keys, got {_kind(config)}"])
    bad = sorted(str(k) for k in config if not isinstance(k, str) or ":" not in k)
    if bad:
        raise SpecError(
            source, [f"config key {bad[0]!r} has no namespace; expected `{PROJECT}:<key>` or `<provider>:<key>`"]
        )
    return config


def _is_secure(value: Any) -> bool:
    return isinstance(value, dict) and set(value) == {"secure"}


def _secure_paths(value: Any, path: str) -> Iterable[str]:
    if _is_secure(value):
        yield path
    elif isinstance(value, dict):
        for k, v in value.items():
            yield from _secure_paths(v, f"{path}.{k}")
    elif isinstance(value, list):
        for i, v in enumerate(value):
            yield from _secure_paths(v, f"{path}[{i}]")


def _kind(value: Any) -> str:
    if value is None:
        return "nothing"
    return {
        dict: "a mapping",
        list: "a list",
        str: "a string",
        bool: "a boolean",
        int: "an integer",
        float: "a number",
    }.get(type(value), type(value).__name__)


def _format_loc(loc: tuple[int | str, ...]) -> str:
    out = ENVIRONMENT_KEY
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else f".{part}"
    return out


def _describe(err: Mapping[str, Any]) -> str:
    """One line for one pydantic error: field path, what was expected, what was given."""
    loc, variants = _without_tags(tuple(err["loc"]))
    kind = err["type"]
    if kind == "extra_forbidden":
        allowed = _allowed_keys(loc[:-1], variants)
        close = difflib.get_close_matches(str(loc[-1]), allowed, n=1)
        hint = f"; did you mean `{close[0]}`?" if close else ""
        hint += f"{'' if close else ';'} expected one of: {', '.join(allowed)}" if allowed else ""
        return f"{_format_loc(loc)}: unknown key{hint}"
    if kind == "missing":
        return f"{_format_loc(loc)}: required, but missing"
    if kind == "union_tag_invalid":  # `job.layout.kind` names no layout
        ctx = err.get("ctx", {})
        tag = str(ctx.get("discriminator", "kind")).strip("'")
        return f"{_format_loc((*loc, tag))}: {ctx.get('tag')!r} is not one of {ctx.get('expected_tags')}"
    message = err["msg"].removeprefix("Value error, ")
    message = message[0].lower() + message[1:] if message else message
    given = err.get("input")
    shown = ""
    if isinstance(given, (str, int, float, bool)) and kind not in ("value_error", "assertion_error"):
        text = repr(given)
        shown = f" (got {text[:60]}{'…' if len(text) > 60 else ''})"
    return f"{_format_loc(loc)}: {message}{shown}"


def _variants(annotation: Any) -> dict[str, type[BaseModel]]:
    """The models of a discriminated union (`job.layout`) by their `kind` tag; empty for any other type."""
    union = _unwrap(annotation)
    if typing.get_origin(union) not in (typing.Union, types.UnionType):
        return {}
    out = {}
    for arg in typing.get_args(union):
        field = arg.model_fields.get("kind") if isinstance(arg, type) and issubclass(arg, BaseModel) else None
        tags = typing.get_args(field.annotation) if field is not None else ()
        out.update({tag: arg for tag in tags if isinstance(tag, str)})
    return out


def _without_tags(loc: tuple[int | str, ...]) -> tuple[tuple[int | str, ...], dict[int, type[BaseModel]]]:
    """`loc` as the YAML spells it: pydantic puts a discriminated union's tag in the path
    (`job.layout.disaggregated.trainer`), which no stack file has. Also returns, by position in the cleaned
    path, the variant each tag chose."""
    out: list[int | str] = []
    chosen: dict[int, type[BaseModel]] = {}
    model: Any = Environment
    for part in loc:
        variants = _variants(model)
        if isinstance(part, str) and part in variants:
            model = chosen[len(out)] = variants[part]
            continue
        out.append(part)
        model = _step(model, part)
    return tuple(out), chosen


def _step(model: Any, part: int | str) -> Any:
    """The annotation one YAML key (or list index) below `model`, None when unknown."""
    model = _unwrap(model)
    if isinstance(part, int):
        args = [a for a in typing.get_args(model) if a is not type(None)]
        return args[0] if args else None
    if isinstance(model, type) and issubclass(model, BaseModel):
        field = next((f for n, f in model.model_fields.items() if (f.alias or n) == part), None)
        return field.annotation if field else None
    return None


def _allowed_keys(loc: tuple[int | str, ...], variants: dict[int, type[BaseModel]] | None = None) -> list[str]:
    """YAML keys accepted at a location of the spec, to suggest when a key is unknown (`variants`: the model a
    discriminated union chose at a position of `loc`, from `_without_tags`)."""
    chosen = variants or {}
    model: Any = Environment
    for depth, part in enumerate(loc):
        model = _step(chosen.get(depth, model), part)
    model = _unwrap(chosen.get(len(loc), model))
    if isinstance(model, type) and issubclass(model, BaseModel):
        return sorted(f.alias or n for n, f in model.model_fields.items())
    return []


def _unwrap(annotation: Any) -> Any:
    """Strip Optional[...] and Annotated[...] to reach the model or container type."""
    while True:
        origin = typing.get_origin(annotation)
        if origin is typing.Annotated:
            annotation = typing.get_args(annotation)[0]
        elif origin in (typing.Union, types.UnionType):
            args = [a for a in typing.get_args(annotation) if a is not type(None)]
            if len(args) != 1:
                return annotation
            annotation = args[0]
        else:
            return annotation
