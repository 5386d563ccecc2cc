"""EFA interfaces per EC2 instance type: how many EFA devices a node of that type exposes.

Source: Amazon EC2 documentation, "Elastic Fabric Adapter – supported instance types" and the
`NetworkInfo.EfaInfo.MaximumEfaInterfaces` field that `aws ec2 describe-instance-types` returns
(https://docs.aws.amazon.com/AWSEC2/latest/APIReference/API_EfaInfo.html). Check a type with:

    aws ec2 describe-instance-types --instance-types p5.48xlarge \
        --query 'InstanceTypes[].NetworkInfo.EfaInfo.MaximumEfaInterfaces'

How the interfaces are laid out on the network cards follows "Maximize network bandwidth on Amazon
EC2 instances with multiple network cards"
(https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/efa-acc-inst-types.html): the primary ENA
interface on card 0 / device 0, an EFA-only interface on card 0 / device 1, and one EFA-only
interface on device 0 of every further card.
"""

from __future__ import annotations

from typing import Any

# Only GPU instance types whose count we have checked; an unknown type is an error, not a guess.
EFA_INTERFACES: dict[str, int] = {
    "p3dn.24xlarge": 1,
    "g5.48xlarge": 1,
    "p4d.24xlarge": 4,
    "p4de.24xlarge": 4,
    "p5.48xlarge": 32,
    "p5e.48xlarge": 32,
    "p5en.48xlarge": 16,
    "p6-b200.48xlarge": 8,
}


def efa_interfaces(instance_type: str) -> int | None:
    """EFA interfaces of an instance type; None when the type is not in the table."""
    return EFA_INTERFACES.get(instance_type)


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
