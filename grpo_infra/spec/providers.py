"""What the clouds' GPU nodes carry by themselves: facts the spec validates pools against and the
node-pool renderers build from. They sit in the spec package, below both, so the spec never reaches
up into a renderer.

EFA interfaces per EC2 instance type, from the Amazon EC2 documentation, "Elastic Fabric Adapter –
supported instance types", and the `NetworkInfo.EfaInfo.MaximumEfaInterfaces` field that
`aws ec2 describe-instance-types` returns
(https://docs.aws.amazon.com/AWSEC2/latest/APIReference/API_EfaInfo.html). Check a type with:

    aws ec2 describe-instance-types --instance-types p5.48xlarge \
        --query 'InstanceTypes[].NetworkInfo.EfaInfo.MaximumEfaInterfaces'

GKE puts the taint `nvidia.com/gpu=present:NoSchedule` on every GPU node itself and tolerates it for
pods that request GPUs (https://cloud.google.com/kubernetes-engine/docs/how-to/gpus).
"""

from __future__ import annotations

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


# GKE adds this taint to every GPU node (and tolerates it for pods requesting GPUs): left to GKE.
GKE_GPU_TAINT = ("nvidia.com/gpu", "present", "NoSchedule")
