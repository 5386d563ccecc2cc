"""The verl releases a stack may declare, with the facts each one's own wheel states.

For every supported release this module keeps what its wheel says (nothing is guessed):
- the rollout engine version each engine extra pins, and torch's, from the wheel's
  `verl-<v>.dist-info/METADATA` (`Requires-Dist: vllm==...; extra == "vllm"`);
- its `Requires-Python` range;
- every key of its trainer config, `verl/trainer/config/_generated_ppo_trainer.yaml` flattened to
  dotted paths, stored in `verl_config/<version>.keys` and read by `check` to refuse an override
  verl would reject at start-up (Hydra: "Could not override ... Key ... is not in struct").

To add a release: `pip download --no-deps verl==X`, then
`python -m grpo_infra.image.verl_releases <verl-X-py3-none-any.whl>` prints its facts and writes its
keys file; add the printed entry to RELEASES. tests/verl holds the stored facts of the installed verl
equal to its wheel's.
"""

from __future__ import annotations

import sys
import zipfile
from dataclasses import dataclass
from email.parser import Parser
from functools import cache
from importlib import resources
from pathlib import Path

CONFIG_IN_WHEEL = "verl/trainer/config/_generated_ppo_trainer.yaml"
# The fully asynchronous trainer's config (job.layout `disaggregated`): ppo_trainer as its defaults plus
# its own keys (`rollout.*`, `async_training.*`, ...), stored as `<version>.fully_async.keys`.
FULLY_ASYNC_CONFIG_IN_WHEEL = "verl/experimental/fully_async_policy/config/fully_async_ppo_trainer.yaml"
# Hydra's own directives in that file, not config keys.
_HYDRA_DIRECTIVES = ("hydra", "defaults")
KEYS_PACKAGE = "grpo_infra.image.verl_config"


@dataclass(frozen=True)
class VerlRelease:
    """One verl release: what its wheel requires of Python and of each engine it pairs with."""

    version: str
    python: str
    """`Requires-Python`, as a specifier (`>=3.10,<3.13`)."""
    engines: dict[str, str]
    """Engine extra → the engine versions that extra requires (`==0.24.0`, `>=0.8.5,<=0.12.0`)."""
    torch: str | None
    """The torch pin of the engine extras, when they pin one (`==2.11.0`)."""

    def pairs_with(self, engine: str, version: str) -> bool:
        """Whether `pip install verl[engine]==self.version engine==version` can resolve."""
        return engine in self.engines and satisfies(version, self.engines[engine])

    def python_ok(self, python: str) -> bool:
        """Whether Python major.minor meets `Requires-Python` (any patch release of it)."""
        return satisfies(f"{python}.0", self.python) or satisfies(f"{python}.99", self.python)


# Each entry from the release's wheel METADATA (Requires-Python; Requires-Dist ...; extra == "<engine>").
RELEASES: dict[str, VerlRelease] = {
    # verl-0.7.0.dist-info/METADATA: Requires-Python >=3.10; extra vllm: vllm<=0.12.0,>=0.8.5;
    # extra sglang: sglang[openai,srt]==0.5.6, torch==2.9.1.
    "0.7.0": VerlRelease(
        version="0.7.0",
        python=">=3.10",
        engines={"vllm": ">=0.8.5,<=0.12.0", "sglang": "==0.5.6"},
        torch=None,
    ),
    # verl-0.9.1.dist-info/METADATA: Requires-Python <3.13,>=3.10; extra vllm: vllm==0.24.0, torch==2.11.0;
    # extra sglang: sglang==0.5.12, torch==2.11.0.
    "0.9.1": VerlRelease(
        version="0.9.1",
        python=">=3.10,<3.13",
        engines={"vllm": "==0.24.0", "sglang": "==0.5.12"},
        torch="==2.11.0",
    ),
}


def satisfies(version: str, specifier: str) -> bool:
    """Whether a release meets a comma-joined specifier of ==, >=, <=, >, < clauses (numeric releases)."""
    from ..spec.image import release

    have = release(version)
    for clause in (c.strip() for c in specifier.split(",") if c.strip()):
        op = next(o for o in ("==", ">=", "<=", ">", "<") if clause.startswith(o))
        want = release(clause[len(op) :])
        width = max(len(have), len(want))
        a, b = have + (0,) * (width - len(have)), want + (0,) * (width - len(want))
        ok = {"==": a == b, ">=": a >= b, "<=": a <= b, ">": a > b, "<": a < b}[op]
        if not ok:
            return False
    return True


@cache
def config_keys(version: str) -> frozenset[str]:
    """Every dotted key of verl `version`'s trainer config (from its wheel); KeyError when not stored."""
    try:
        text = resources.files(KEYS_PACKAGE).joinpath(f"{version}.keys").read_text(encoding="utf-8")
    except FileNotFoundError:
        raise KeyError(version) from None
    return frozenset(line for line in text.splitlines() if line and not line.startswith("#"))


@cache
def fully_async_config_keys(version: str) -> frozenset[str]:
    """Every dotted key of verl `version`'s fully asynchronous trainer config: the trainer config's keys and
    the ones fully_async_ppo_trainer.yaml adds; KeyError when not stored."""
    try:
        text = resources.files(KEYS_PACKAGE).joinpath(f"{version}.fully_async.keys").read_text(encoding="utf-8")
    except FileNotFoundError:
        raise KeyError(version) from None
    added = {line for line in text.splitlines() if line and not line.startswith("#")}
    return config_keys(version) | added


def layout_keys(config_yaml: str) -> list[str]:
    """The keys a layout's config file adds over the trainer config it extends (Hydra's directives left out)."""
    return [k for k in flatten_keys(config_yaml) if k.split(".")[0] not in _HYDRA_DIRECTIVES]


def flatten_keys(config_yaml: str) -> list[str]:
    """Dotted paths of every node of a verl trainer config (dicts and leaves; lists are leaves)."""
    from omegaconf import DictConfig, OmegaConf

    config = OmegaConf.create(config_yaml)
    keys: list[str] = []

    def walk(node: DictConfig, prefix: str) -> None:
        for key in list(node.keys()):
            # _get_node sees keys whose value is still `???` (required, unset), which iteration by value does not.
            child = node._get_node(key)
            path = f"{prefix}{key}"
            keys.append(path)
            if isinstance(child, DictConfig):
                walk(child, f"{path}.")

    assert isinstance(config, DictConfig)
    walk(config, "")
    return sorted(keys)


def wheel_facts(wheel: Path) -> tuple[str, str, dict[str, str]]:
    """(version, Requires-Python, {"extra:package": specifier}) from a verl wheel's METADATA."""
    with zipfile.ZipFile(wheel) as archive:
        name = next(n for n in archive.namelist() if n.endswith(".dist-info/METADATA"))
        metadata = Parser().parsestr(archive.read(name).decode("utf-8"))
    pins: dict[str, str] = {}
    for requirement in metadata.get_all("Requires-Dist") or []:
        spec, _, marker = requirement.partition(";")
        if "extra ==" not in marker:
            continue
        extra = marker.split("extra ==")[1].strip().strip("'\"")
        cut = next((i for i, ch in enumerate(spec) if ch in "[=<>!~ "), len(spec))
        package, rest = spec[:cut], spec[cut:]
        pins[f"{extra}:{package}"] = rest.split("]")[-1].strip()
    return metadata["Version"], metadata["Requires-Python"], pins


def main(argv: list[str]) -> int:
    """Print a wheel's facts and write its keys file next to this module."""
    if len(argv) != 1 or not argv[0].endswith(".whl"):
        print("usage: python -m grpo_infra.image.verl_releases verl-X-py3-none-any.whl", file=sys.stderr)
        return 2
    wheel = Path(argv[0])
    version, python, pins = wheel_facts(wheel)
    with zipfile.ZipFile(wheel) as archive:
        keys = flatten_keys(archive.read(CONFIG_IN_WHEEL).decode("utf-8"))
    out = Path(__file__).with_name("verl_config") / f"{version}.keys"
    out.write_text(f"# {CONFIG_IN_WHEEL} of verl {version}, flattened\n" + "\n".join(keys) + "\n", encoding="utf-8")
    with zipfile.ZipFile(wheel) as archive:
        if FULLY_ASYNC_CONFIG_IN_WHEEL in archive.namelist():
            added = layout_keys(archive.read(FULLY_ASYNC_CONFIG_IN_WHEEL).decode("utf-8"))
            out.with_name(f"{version}.fully_async.keys").write_text(
                f"# {FULLY_ASYNC_CONFIG_IN_WHEEL} of verl {version}, flattened (over the trainer config)\n"
                + "\n".join(added)
                + "\n",
                encoding="utf-8",
            )
    print(f"verl {version}: Requires-Python {python}; {len(keys)} config keys written to {out}")
    for extra in ("vllm", "sglang"):
        print(f"  extra {extra}: {extra} {pins.get(f'{extra}:{extra}')}, torch {pins.get(f'{extra}:torch')}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
