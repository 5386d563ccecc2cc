"""A local Kubernetes for the Kubernetes target: a real control plane, Kueue and KubeRay on loopback,
fake GPU nodes from a stack's pools (the twin of grpo_infra.sandbox for Slurm)."""
