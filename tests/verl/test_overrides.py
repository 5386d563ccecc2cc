"""Every override we hand verl exists in verl's own trainer config and parses in Hydra's grammar.

The config `check` uses is the one stored for the verl release each stack's image declares
(grpo_infra/image/verl_config); these tests hold the stored copy of the installed release equal to
its wheel's, and judge every shipped stack against the installed verl too."""

from __future__ import annotations

import importlib.util
from importlib.metadata import distribution, version
from pathlib import Path

import pytest
from hydra.core.override_parser.overrides_parser import OverridesParser
from omegaconf import OmegaConf

from grpo_infra import verl
from grpo_infra.image.verl_releases import FULLY_ASYNC_CONFIG_IN_WHEEL, RELEASES, config_keys, flatten_keys
from grpo_infra.spec import load_stack
from grpo_infra.spec.job import DERIVED_OVERRIDES, LAYOUT_OVERRIDES, REWARD_MODEL_OVERRIDES
from grpo_infra.watchdog import SETUP_HOOK_KEY
from tests.conftest import ROOT, SHIPPED_STACKS


def _verl_config_dir() -> Path:
    spec = importlib.util.find_spec("verl")
    assert spec is not None and spec.submodule_search_locations, "verl is not installed (pip install --no-deps verl)"
    return Path(next(iter(spec.submodule_search_locations))) / "trainer" / "config"


TRAINER = OmegaConf.load(_verl_config_dir() / "_generated_ppo_trainer.yaml")


def _fully_async() -> object:
    """verl's fully_async_ppo_trainer config as Hydra composes it (job.layout `disaggregated`): the trainer
    config, then its own keys over it."""
    own = OmegaConf.load(_verl_config_dir().parents[1] / FULLY_ASYNC_CONFIG_IN_WHEEL.removeprefix("verl/"))
    del own["hydra"], own["defaults"]
    return OmegaConf.merge(TRAINER, own)


FULLY_ASYNC = _fully_async()
_MISSING = object()


def _lookup(key: str, config: object = TRAINER) -> object:
    node: object = config
    for part in key.split("."):
        if not OmegaConf.is_dict(node):
            return _MISSING
        # _get_node sees keys whose value is still `???` (required, unset), which `in` does not.
        child = node._get_node(part, throw_on_missing_key=False)  # type: ignore[union-attr]
        if child is None:
            return _MISSING
        node = child
    return node


def test_stored_config_keys_of_the_installed_verl_are_its_wheels() -> None:
    installed = version("verl")
    text = (_verl_config_dir() / "_generated_ppo_trainer.yaml").read_text()
    assert config_keys(installed) == frozenset(flatten_keys(text))


def test_stored_release_facts_of_the_installed_verl_are_its_metadata() -> None:
    """Requires-Python and each engine extra's pins, as the installed wheel's METADATA states them."""
    dist = distribution("verl")
    stored = RELEASES[dist.version]
    assert stored.python == _normalized(dist.metadata["Requires-Python"])
    pins = {}
    for requirement in dist.requires or []:
        spec, _, marker = requirement.partition(";")
        for engine in ("vllm", "sglang"):
            if f'extra == "{engine}"' in marker and spec.startswith((f"{engine}==", "torch==")):
                pins[(engine, spec.split("==")[0])] = "==" + spec.split("==")[1]
    assert {e: pins[(e, e)] for e in ("vllm", "sglang")} == stored.engines
    assert {pins[(e, "torch")] for e in ("vllm", "sglang")} == {stored.torch}


def _normalized(specifier: str) -> str:
    """`<3.13,>=3.10` and `>=3.10,<3.13` are the same specifier."""
    return ",".join(sorted(specifier.split(","), key=lambda c: c.lstrip("<>=!~")))


@pytest.mark.parametrize("stack", SHIPPED_STACKS)
def test_every_shipped_stack_declares_the_installed_verl(stack: str) -> None:
    assert load_stack(stack, ROOT).environment.image.contents.verl == version("verl")


@pytest.mark.parametrize("stack", SHIPPED_STACKS)
def test_every_override_key_exists_in_verl(stack: str) -> None:
    """In the config of the trainer the stack runs: main_ppo's, or the fully asynchronous one's."""
    env = load_stack(stack, ROOT).environment
    config = FULLY_ASYNC if env.disaggregated else TRAINER
    missing = [k for k, _ in verl.overrides(env) if not k.startswith("+") and _lookup(k, config) is _MISSING]
    assert not missing, f"not in verl's {'fully async' if env.disaggregated else 'trainer'} config: {missing}"


@pytest.mark.parametrize("stack", SHIPPED_STACKS)
def test_overrides_parse_back_to_their_values(stack: str) -> None:
    env = load_stack(stack, ROOT).environment
    pairs = verl.overrides(env)
    parsed = OverridesParser.create().parse_overrides(verl.override_args(pairs))
    for (key, value), override in zip(pairs, parsed, strict=True):
        # `+key` is Hydra's append form: the key without its `+`, parsed as an addition.
        assert override.key_or_group == key.removeprefix("+")
        assert override.is_add() == key.startswith("+")
        assert override.value() == value


def test_gang_shape_is_derived_not_typed() -> None:
    env = load_stack("onprem-slurm", ROOT).environment
    pairs = dict(verl.overrides(env))
    assert pairs[verl.NNODES] == 8  # job.nodes
    assert pairs[verl.N_GPUS_PER_NODE] == 8  # pool gpu.perNode
    assert pairs["algorithm.adv_estimator"] == "grpo"
    assert pairs["actor_rollout_ref.rollout.n"] == env.job.rollout.group_size


def test_a_misspelled_key_would_be_caught() -> None:
    assert _lookup("trainer.nnodes") is not _MISSING
    assert _lookup("trainer.nnode") is _MISSING


def test_wandb_logger_only_with_its_key() -> None:
    with_key = dict(verl.overrides(load_stack("eks-prod", ROOT).environment))
    without = dict(verl.overrides(load_stack("local-slurm", ROOT).environment))
    assert with_key["trainer.logger"] == ["console", "wandb"]
    assert without["trainer.logger"] == ["console"]


@pytest.mark.parametrize("stack", SHIPPED_STACKS)
def test_overrides_cannot_shadow_what_the_spec_sets(stack: str) -> None:
    """Hydra keeps the last value of a key: an extra override of a spec-set key would silently win."""
    env = load_stack(stack, ROOT).environment
    spec_set = {k.removeprefix("+") for k, _ in verl.overrides(env)} - {k.removeprefix("+") for k in env.job.overrides}
    # The attention implementation is passed only when it is not verl's default; a layout's keys only for
    # a disaggregated job, a reward model's only when it has that role.
    unused = {verl.ATTENTION_KEY.removeprefix("+")} | REWARD_MODEL_OVERRIDES
    if not env.disaggregated:
        unused |= LAYOUT_OVERRIDES
    # the worker setup hook only for an image that carries this project (grpo_infra/watchdog.py)
    if not env.image.contents.grpo_infra:
        unused |= {SETUP_HOOK_KEY.removeprefix("+")}
    assert spec_set | unused == DERIVED_OVERRIDES
