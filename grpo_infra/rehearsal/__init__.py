"""`grpo-infra rehearse STACK`: a stack's own objects on local real nodes shaped like its pools.

A local lab beside the product, like the local Kubernetes it runs on (grpo_infra/kube): it reads a stack,
plans what to shrink and what to substitute (plan.py, pure), scales the objects' CPU and memory by each
pool's factor (scale.py, pure), and runs the result through the real Pulumi engine (run.py).
"""
