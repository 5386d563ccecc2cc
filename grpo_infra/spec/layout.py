"""Where GRPO's roles run: all on one pool (`colocated`), or trainer and rollout on pools of their own
(`disaggregated`).

Colocated is verl's hybrid engine (`verl.trainer.main_ppo`): every GPU of one gang switches between
training and generation. Disaggregated is verl 0.9.1's fully asynchronous trainer
(`verl.experimental.fully_async_policy.fully_async_main`): the trainer's GPUs only train, the rollout's
GPUs only generate, and the two exchange weights every few steps. Each role names its pool and its node
count once; verl's per-role `nnodes`/`n_gpus_per_node`, the Kubernetes worker groups and the Kueue pod
sets are all derived from it (grpo_infra/verl.py, grpo_infra/k8s/raycluster.py).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Annotated, Literal

from pydantic import Field

from .base import DnsLabel, PositiveInt, SpecModel

if TYPE_CHECKING:
    from .pools import Pool

# The roles a disaggregated job places, as the spec spells them (its keys) and as Kubernetes names their
# worker groups.
Role = Literal["trainer", "rollout", "rewardModel"]
ROLE_GROUP = {"trainer": "trainer", "rollout": "rollout", "rewardModel": "reward-model"}


class RolePool(SpecModel):
    """One role's share of the machines: which pool, how many of its nodes."""

    pool: DnsLabel
    """The pool whose nodes the role runs on."""
    nodes: PositiveInt
    """How many of the pool's nodes the role holds, all at once."""


class Colocated(SpecModel):
    """Every role on the gang of `job.pool` (verl's hybrid engine)."""

    kind: Literal["colocated"] = "colocated"
    """`colocated`: one pool, each GPU switching between training and generation."""


class Disaggregated(SpecModel):
    """Trainer and rollout (and optionally a generative reward model) on pools of their own, admitted as one gang."""

    kind: Literal["disaggregated"]
    """`disaggregated`: verl's fully asynchronous trainer (`fully_async_main`)."""
    trainer: RolePool
    """Where the actor (and the reference model) train: verl's `trainer.nnodes` and `trainer.n_gpus_per_node`."""
    rollout: RolePool
    """Where the rollout engine generates: verl's `rollout.nnodes` and `rollout.n_gpus_per_node`."""
    reward_model: RolePool | None = Field(
        default=None,
        description="A reward model served on nodes of its own: verl's `reward.reward_model.nnodes` and "
        "`n_gpus_per_node` (standalone, `enable_resource_pool`). It must share the rollout's pool: verl 0.9.1 places "
        'its replicas and the rollout\'s by GPU count alone (docs/kubernetes.md, "Disaggregated GRPO").',
    )

    def roles(self) -> list[tuple[Role, RolePool]]:
        """The roles in the order verl places them: the trainer first (fully_async_main.py:77-84)."""
        out: list[tuple[Role, RolePool]] = [("trainer", self.trainer), ("rollout", self.rollout)]
        if self.reward_model is not None:
            out.append(("rewardModel", self.reward_model))
        return out


Layout = Annotated[Colocated | Disaggregated, Field(discriminator="kind")]


@dataclass(frozen=True)
class RoleGang:
    """One role of a disaggregated job with its pool resolved: derived, never typed twice."""

    role: Role
    pool: Pool
    nodes: int

    @property
    def gpus_per_node(self) -> int:
        return self.pool.gpu.per_node

    @property
    def world_size(self) -> int:
        return self.nodes * self.gpus_per_node

    @property
    def group_name(self) -> str:
        """The role's Ray worker group (and Kueue pod set) name."""
        return ROLE_GROUP[self.role]


# The Ray custom resource each node of a disaggregated job advertises: one unit per GPU, named after its
# pool (`ray start --resources`, Ray 2.60 python/ray/scripts/scripts.py:568-572). It makes a role's nodes
# visible to Ray (`ray status`, `ray.nodes()`) and is what a bundle asking for it would be pinned by;
# verl 0.9.1 asks for none (docs/kubernetes.md, "Disaggregated GRPO").
POOL_RESOURCE_PREFIX = "grpo_pool:"


def pool_resource(pool_name: str) -> str:
    """The Ray resource a node of pool `pool_name` advertises."""
    return f"{POOL_RESOURCE_PREFIX}{pool_name}"
