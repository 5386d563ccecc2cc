# The resume rule, shipped with the job by grpo-infra.
