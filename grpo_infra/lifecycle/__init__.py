"""The Ray node lifecycle of a job, written once for every launch path (docs/architecture.md).

`ray_node.library(ports)` renders one bash library (`ray_node.sh.j2`): the run's port block, the node's address and
its NCCL/Gloo interfaces, `ray start` with every port inside the block, the readiness barrier's program,
the stop of exactly this job's Ray on a node (the GCS last, as `ray stop` orders it), and the last
checkpointed step. The sbatch (slurm/grpo.sbatch.j2) and every launcher's node scripts
(grpo_infra/launchers/templates) embed the same text and call its functions; none of them has a copy.
"""

# Nothing else here: `python3 -m grpo_infra.lifecycle.resume` imports this package inside the job's image,
# which may hold grpo-infra without its dependencies (the renderer is `ray_node`). The resume rule's program
# is self-contained (it also runs as a lone file), so verl's tracker name and the identity file's live there.
