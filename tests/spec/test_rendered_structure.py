"""No value a stack file may hold changes the structure of a rendered file: every renderer quotes for its target.

Each shipped stack is rendered as shipped (plus a plain env value and a plain verl override) and again with
hostile values in its free-text fields (description, project, experiment, GPU model, the env value, string
verl overrides) and its paths (checkpoint directory, model path, data files), values the spec still accepts — quotes of both kinds, `$(…)`, backquotes,
`${IFS}`, `;|&<>*?{}[]\\`, `#`, `: `, a leading `- ` and `=`. The two renders must have the same files, and
each file must parse back to the same structure as its plain twin:

- YAML (`.yaml`, `.yml`): the same shape under YAML's safe loader (keys and list lengths, recursively);
- shell (`#!` files, `.sh`, `.sbatch`, and the scripts inside YAML and the Dockerfile: a RayJob entrypoint,
  SkyPilot's `setup`/`run`, dstack's `commands`, `RUN` lines, and the scripts those hand to `sh -c`, `bash -c`
  or keep in a `*_command` variable): `bash -n` accepts it, and its skeleton is unchanged (see `skeleton`);
- `slurm.conf`, `gres.conf`, `topology.conf`: the same lines, each with the same `Key=` settings once Slurm's
  `#` comments are cut off;
- `Dockerfile`: the same instructions in the same order.

The project has no shell parser among its dependencies (bashlex is not one), so the shell check is two-fold: bash itself
says the script parses, and `skeleton` — a small scanner of bash's quoting rules — reduces a script to what
bash would treat as structure: words, operators, newlines, comments and the expansions bash would perform
(`$…` and backquotes outside single quotes). A quoted value is one word with no live expansion whatever it
holds, so the skeletons of the plain and the hostile render are equal exactly when every value stayed data.
The scanner need not model all of bash: both renders come from one template, so what it misreads it misreads
in both; what it must get right is quoting, which it models as bash does.
"""

from __future__ import annotations

import re
import shlex
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from pydantic import ValidationError

from grpo_infra.spec import Environment, load_stack
from grpo_infra.synth import render
from tests.conftest import ROOT, SHIPPED_STACKS

# Hostile but printable on one line: every free-text type accepts them.
HOSTILE_TEXT = [
    "- a\"b'c $(touch /tmp/PWNED) `touch /tmp/PWNED`; x|y&z<w>v*?{a,b}[0] \\ # k: v = ${IFS} Prolog=/x",
    "*a !t %p @u {k: v} [x] 'q' \"d\" \\\" \\' #c NodeName=evil $(id) `id` ${HOME} && || ; & PWNED",
]
# One word (paths and locations take no whitespace).
HOSTILE_WORD = [
    "/a\"b'c$(touch${IFS}/tmp/PWNED)`id`;x|y&z<w>v*?{a,b}[0]\\#k:v=Prolog=/x",
    "/'\"$HOME\\\"${IFS}'$(id)`id`&&||;#c:-=x/PWNED",
]
# One word for the paths that refuse quotes, `$`, backquotes and backslashes (Slurm's, the launchers').
HOSTILE_BARE = ["/a;x|y&z<w>v*?{a,b}[0]#k=Prolog=/x(PWNED)", "/&&||;#c=-x>y<(PWNED)"]
PLAIN_TEXT = "plain text"
NOTE_ENV = "GRPO_HOSTILE_NOTE"
NOTE_OVERRIDE = "trainer.grpo_hostile_note"


def _text(variant: int) -> list[str]:
    return [HOSTILE_TEXT[variant]]


def _path(variant: int) -> list[str]:
    return [HOSTILE_WORD[variant], HOSTILE_BARE[variant]]


def _mount(variant: int) -> list[str]:
    """`/host:/container`, both hostile: a mount takes one `:` and no `,`."""
    return [f"{w}:{w}" for w in (HOSTILE_WORD[variant].replace(":", ""), HOSTILE_BARE[variant])]


def _fields(raw: dict[str, Any], variant: int) -> Iterator[tuple[dict[str, Any] | list[Any], str | int, list[str]]]:
    """Every free-text or path field of a stack: (container, key, hostile values to try, most hostile first)."""
    yield raw, "description", _text(variant)
    job = raw["job"]
    yield job, "project", _text(variant)
    yield job, "experiment", _text(variant)
    for key in job["env"]:
        yield job["env"], key, _text(variant)
    for key, value in job["overrides"].items():
        if isinstance(value, str):
            yield job["overrides"], key, _text(variant)
    for pool in raw["pools"]:
        yield pool["gpu"], "model", _text(variant)
    yield job, "modelPath", _path(variant)
    yield job["checkpoint"], "dir", _path(variant)
    for files in (job["data"]["trainFiles"], job["data"]["valFiles"]):
        for index in range(len(files)):
            yield files, index, _path(variant)
    volume = job["checkpoint"].get("volume", {})
    if "hostPath" in volume:
        yield volume, "hostPath", _path(variant)
    if "nfs" in volume:
        yield volume["nfs"], "path", _path(variant)
    slurm = raw.get("slurm") or {}
    container = slurm.get("container", {})
    for index in range(len(container.get("mounts", []))):
        yield container["mounts"], index, _mount(variant)
    if "workdir" in container:
        yield container, "workdir", _path(variant)
    for index in range(len(slurm.get("sharedPaths", []))):
        yield slurm["sharedPaths"], index, _path(variant)
    for launcher in (raw.get("launchers") or {}).values():
        for storage in launcher.get("storage", []):
            for key in ("path", "instancePath"):
                if key in storage:
                    yield storage, key, _path(variant)


def _accepted(raw: dict[str, Any]) -> bool:
    try:
        Environment.model_validate(raw)
    except ValidationError:
        return False
    return True


def _environment(stack: str, variant: int | None) -> Environment:
    """The stack with a note env var and override added; with hostile values (variant) in every field it can.

    Each field takes the first of its hostile values the spec accepts there, given the fields set before it
    (a checkpoint directory must stay under a mount, say); a field that accepts none keeps its value."""
    raw = load_stack(stack, ROOT).environment.model_dump(by_alias=True, exclude_none=True)
    raw["job"].setdefault("env", {})[NOTE_ENV] = PLAIN_TEXT
    raw["job"].setdefault("overrides", {})[NOTE_OVERRIDE] = PLAIN_TEXT
    if variant is not None:
        for number, (container, key, values) in enumerate(list(_fields(raw, variant))):
            before = container[key]  # type: ignore[index]
            for value in values:
                # Numbered, so that paths which must differ (three storage mounts) still do.
                container[key] = value.replace("PWNED", f"PWNED{number}")  # type: ignore[index]
                if _accepted(raw):
                    break
            else:
                container[key] = before  # type: ignore[index]
    return Environment.model_validate(raw)


# --- shell --------------------------------------------------------------------------------------------------

_OPERATORS = set(";&|<>()")


def _heredoc(text: str, i: int) -> tuple[str, bool, bool, int]:
    """At `<<` (i past it): the delimiter, whether it is quoted (body literal), `<<-`, and the index after it."""
    dash = text.startswith("-", i)
    i += dash
    while text[i] in " \t":
        i += 1
    match = re.compile(r"'([^']*)'|\"([^\"]*)\"|\\?([A-Za-z0-9_]+)").match(text, i)
    assert match, f"unreadable here-document delimiter at {text[i : i + 20]!r}"
    word = next(g for g in match.groups() if g is not None)
    return word, match.group(3) is None or match.group(0).startswith("\\"), dash, match.end()


def skeleton(script: str) -> str:
    """What bash treats as structure in `script`: `w` per word, operators, newlines, `#` per comment, `$` per
    expansion bash performs (a `$` or backquote outside single quotes and not escaped), `H` per here-document.

    Quoting follows bash: nothing is special inside '…'; inside "…" only `\\`, `$` and backquotes are; `$(…)`
    and backquotes open a command context inside either; `$'…'` is an ANSI-C string."""
    out: list[str] = []
    frames: list[list[Any]] = [["cmd", 0]]  # kind ("cmd", "dq", "bq"), open parentheses of a cmd frame
    pending: list[tuple[str, bool, bool]] = []
    i, n = 0, len(script)

    def emit(token: str) -> None:
        if token not in "w " or not out or out[-1] != token:
            out.append(token)

    while i < n:
        c = script[i]
        kind = frames[-1][0]
        if kind == "dq":
            if c == "\\":
                i += 2
                continue
            if c == '"':
                frames.pop()
            elif c == "$" or c == "`":
                emit("$")
                if script.startswith("$(", i):
                    frames.append(["cmd", 0])
                    i += 1
                elif c == "`":
                    frames.append(["bq", 0])
            i += 1
            continue
        # a command context: the top level, $(…) or `…`
        if c == "\\":
            emit("w")
            i += 2
            continue
        if c == "'":
            emit("w")
            end = script.find("'", i + 1)
            i = n if end < 0 else end + 1
            continue
        if script.startswith("$'", i):
            emit("w")
            i += 2
            while i < n and script[i] != "'":
                i += 2 if script[i] == "\\" else 1
            i += 1
            continue
        if c == '"':
            emit("w")
            frames.append(["dq", 0])
        elif c == "`":
            if kind == "bq":
                frames.pop()
            else:
                emit("$")
                frames.append(["bq", 0])
        elif c == "$":
            emit("$")
            emit("w")
            if script.startswith("$(", i):
                frames.append(["cmd", 0])
                i += 1
        elif c == "#" and (not out or out[-1] in " \n" or out[-1] in _OPERATORS):
            emit("#")
            while i < n and script[i] != "\n":
                i += 1
            continue
        elif script.startswith("<<<", i):
            emit("<<<")
            i += 3
            continue
        elif script.startswith("<<", i):
            word, literal, dash, i = _heredoc(script, i + 2)
            pending.append((word, literal, dash))
            emit("<<")
            emit("w")
            continue
        elif c == "\n":
            emit("\n")
            while pending:
                word, literal, dash = pending.pop(0)
                end = i + 1
                while True:
                    line_end = script.find("\n", end)
                    line = script[end : n if line_end < 0 else line_end]
                    if (line.lstrip("\t") if dash else line) == word or line_end < 0:
                        break
                    if not literal:
                        out.extend("$" for j, ch in enumerate(line) if ch in "$`" and line[j - 1 : j] != "\\")
                    end = line_end + 1
                emit("H")
                i = n if line_end < 0 else line_end
        elif c in " \t":
            emit(" ")
        elif c in _OPERATORS:
            frame = frames[-1]
            if c == "(":
                frame[1] += 1
            elif c == ")":
                if frame[1] > 0:
                    frame[1] -= 1
                elif len(frames) > 1:
                    frames.pop()
            emit(c)
        else:
            emit("w")
        i += 1
    return "".join(out)


def nested_scripts(script: str) -> list[str]:
    """Scripts `script` hands on as one word: the argument of `sh -c`/`bash -c`, a `*_command=` assignment.

    Read line by line with shlex (POSIX quoting); a line shlex cannot read (a here-document's Python, a
    multi-line string) is skipped the same way in both renders, as it holds no hand-over of that kind."""
    found = []
    for line in script.splitlines():
        try:
            lexer = shlex.shlex(line, posix=True, punctuation_chars=";&|()<>")
            lexer.whitespace_split = True
            words = list(lexer)
        except ValueError:
            continue
        for before, flag, word in zip(words, words[1:], words[2:], strict=False):
            if before.rsplit("/", 1)[-1] in ("sh", "bash") and flag in ("-c", "-lc", "-ec"):
                found.append(word)
        found += [w.split("=", 1)[1] for w in words if re.match(r"[A-Za-z_]*_command=", w)]
    return found


def _with_nested(script: str) -> list[str]:
    scripts = [script]
    for inner in nested_scripts(script):
        scripts += _with_nested(inner)
    return scripts


def _yaml_scripts(node: Any) -> Iterator[str]:
    """The shell scripts held in a rendered YAML document, found by where they live."""
    if isinstance(node, dict):
        for k, v in node.items():
            if k in ("entrypoint", "run", "setup") and isinstance(v, str):
                yield v
            elif k == "commands" and isinstance(v, list) and all(isinstance(x, str) for x in v):
                yield "\n".join(v)
            else:
                yield from _yaml_scripts(v)
    elif isinstance(node, list):
        for index, item in enumerate(node):
            shell = index and str(node[index - 1]).rsplit("/", 1)[-1] in ("sh", "bash")
            if shell and item in ("-c", "-lc") and index + 1 < len(node) and isinstance(node[index + 1], str):
                yield node[index + 1]
            yield from _yaml_scripts(item)


def _dockerfile_instructions(text: str) -> list[tuple[str, str]]:
    """(INSTRUCTION, rest) per logical line, continuations joined, comments and blank lines dropped."""
    logical = re.sub(r"\\\n", " ", "\n".join(line for line in text.splitlines() if not line.lstrip().startswith("#")))
    found = []
    for line in logical.splitlines():
        if line.strip():
            op, _, rest = line.strip().partition(" ")
            found.append((op, rest))
    return found


def _is_shell(path: str, text: str) -> bool:
    return path.endswith((".sh", ".sbatch")) or (text.startswith("#!") and "sh" in text.splitlines()[0])


def _documents(text: str) -> list[Any]:
    """The YAML documents of `text` (libyaml's safe loader: the pure-Python one would take seconds here)."""
    return list(yaml.load_all(text, Loader=yaml.CSafeLoader))


def shell_scripts(path: str, text: str, documents: list[Any] | None = None) -> list[str]:
    """Every shell script in one rendered file, nested ones included; `documents` when YAML already read."""
    if _is_shell(path, text):
        found = [text]
    elif path.endswith((".yaml", ".yml")):
        docs = _documents(text) if documents is None else documents
        found = [s for doc in docs for s in _yaml_scripts(doc)]
    elif path.rsplit("/", 1)[-1] == "Dockerfile":
        found = [rest for op, rest in _dockerfile_instructions(text) if op == "RUN" and not rest.startswith("[")]
    else:
        found = []
    return [s for script in found for s in _with_nested(script)]


def bash_refusals(scripts: list[str]) -> list[str]:
    """`bash -n`'s complaints about each script; [] when all parse."""
    complaints = []
    with tempfile.TemporaryDirectory() as tmp:
        for index, script in enumerate(scripts):
            file = Path(tmp) / f"{index}.sh"
            file.write_text(script)
            done = subprocess.run(["bash", "-n", str(file)], capture_output=True, text=True, check=False)
            if done.returncode:
                complaints.append(done.stderr.strip())
    return complaints


# --- YAML, Slurm configuration, Dockerfile --------------------------------------------------------------------


def shape(node: Any) -> Any:
    """A document's structure without its scalar values: mapping keys in order and list lengths, recursively."""
    if isinstance(node, dict):
        # A path as a key (SkyPilot's file_mounts) is data, as a path value is.
        return [("<path>" if str(k).startswith("/") else str(k), shape(v)) for k, v in node.items()]
    if isinstance(node, list):
        return [shape(v) for v in node]
    return "scalar"


def slurm_settings(text: str) -> list[list[str]]:
    """The `Key=` settings of each line as Slurm reads them: a `#` not escaped starts a comment."""
    lines = []
    for line in text.splitlines():
        content = re.split(r"(?<!\\)#", line, maxsplit=1)[0]
        lines.append(re.findall(r"(?:^|\s)([A-Za-z]+)=", content))
    return lines


def structure(path: str, text: str) -> tuple[dict[str, Any], list[str]]:
    """What must not change in a rendered file when only the values in it do, and the file's shell scripts."""
    name = path.rsplit("/", 1)[-1]
    parts: dict[str, Any] = {}
    documents = None
    if name.endswith((".yaml", ".yml")):
        documents = _documents(text)
        parts["yaml"] = [shape(doc) for doc in documents]
    if name in ("slurm.conf", "gres.conf", "topology.conf"):
        parts["slurm"] = slurm_settings(text)
    if name == "Dockerfile":
        parts["instructions"] = [op for op, _ in _dockerfile_instructions(text)]
    scripts = shell_scripts(path, text, documents)
    parts["shell"] = [skeleton(script) for script in scripts]
    return parts, scripts


def _structures(files: dict[str, str]) -> dict[str, tuple[dict[str, Any], list[str]]]:
    """Each file's structure, by path; the resume ConfigMap's file under one name, as its name carries the
    digest of the experiment (grpo_infra/k8s/shipped.py `resume_config_map_name`), which the values change."""
    return {
        re.sub(r"-resume-[0-9a-f]{10}\.yaml$", "-resume.yaml", path): structure(path, text)
        for path, text in files.items()
    }


@pytest.fixture(scope="module")
def plain() -> dict[str, dict[str, tuple[dict[str, Any], list[str]]]]:
    """The structure of each stack's render with plain values."""
    return {stack: _structures(render(_environment(stack, None))) for stack in SHIPPED_STACKS}


@pytest.mark.parametrize("variant", range(len(HOSTILE_TEXT)))
@pytest.mark.parametrize("stack", SHIPPED_STACKS)
def test_hostile_values_leave_every_rendered_file_with_the_same_structure(
    stack: str, variant: int, plain: dict[str, dict[str, tuple[dict[str, Any], list[str]]]]
) -> None:
    files = render(_environment(stack, variant))
    landed = [path for path, text in files.items() if "PWNED" in text]
    assert landed, "no hostile value reached a rendered file: the test proves nothing"
    hostile = _structures(files)
    assert sorted(hostile) == sorted(plain[stack])
    for path, (parts, _) in hostile.items():
        assert parts == plain[stack][path][0], path
    assert bash_refusals([s for _, scripts in hostile.values() for s in scripts]) == []


def test_skeleton_sees_a_value_that_escaped_its_quotes() -> None:
    """The scanner itself: quoted values are one word with no expansion; unquoted ones are not."""
    value = HOSTILE_WORD[0]
    assert skeleton(f"echo {shlex.quote(value)}") == skeleton("echo plain")
    assert skeleton('echo "a $(touch /tmp/PWNED)"') != skeleton('echo "a plain"')
    assert skeleton('echo "a `id`"') != skeleton('echo "a plain"')
    assert skeleton("echo a b;c") != skeleton("echo plain")
    assert skeleton("echo a #b") != skeleton("echo a b")
    assert skeleton("echo \"$(cat <<'X'\n$(id)\nX\n)\"") == skeleton("echo \"$(cat <<'X'\nplain\nX\n)\"")
    assert skeleton("cat <<X\n$(id)\nX\n") != skeleton("cat <<X\nplain\nX\n")
    assert skeleton('read -r a <<<"$x"\necho a #b') != skeleton('read -r a <<<"$x"\necho a b')
    assert nested_scripts(f"sh -c {shlex.quote('echo ' + shlex.quote(value))}") == ["echo " + shlex.quote(value)]
