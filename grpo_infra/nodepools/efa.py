"""EFA interfaces on a node's launch template: how the EFA devices of an instance type are laid out.

The count per instance type is a fact the spec checks too, so it lives in `grpo_infra.spec.providers`.

How the interfaces are laid out on the network cards follows "Maximize network bandwidth on Amazon
EC2 instances with multiple network cards"
(https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/efa-acc-inst-types.html): the primary ENA
interface on card 0 / device 0, an EFA-only interface on card 0 / device 1, and one EFA-only
interface on device 0 of every further card.
"""

from __future__ import annotations

from typing import Any

from ..spec.providers import EFA_INTERFACES, efa_interfaces

__all__ = ["EFA_INTERFACES", "efa_interfaces", "network_interfaces"]


def network_interfaces(count: int, security_group_ids: list[str]) -> list[dict[str, Any]]:
    """Launch-template network interfaces giving a node `count` EFA devices plus its primary ENA.

    Keys are pulumi-aws's `LaunchTemplateNetworkInterface` arguments.
    """
    primary = {
        "network_card_index": 0,
        "device_index": 0,
        "interface_type": "interface",
        "delete_on_termination": True,
        "security_groups": list(security_group_ids),
    }
    efa = [
        {
            "network_card_index": card,
            "device_index": 1 if card == 0 else 0,
            "interface_type": "efa-only",
            "delete_on_termination": True,
            "security_groups": list(security_group_ids),
        }
        for card in range(count)
    ]
    return [primary, *efa]
