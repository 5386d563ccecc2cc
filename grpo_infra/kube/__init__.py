"""A local Kubernetes for the Kubernetes target: a real control plane, Kueue and KubeRay as processes
on loopback, fake GPU nodes from a stack's pools (the twin of grpo_infra.sandbox for Slurm).

Modules: `versions` and `build` (standard library only: the build script runs before any
virtualenv), `plan` (what runs, pure), `cluster` (up/down/status/env), `certs`.
"""
