# The fabric gate's package, shipped with the job by grpo-infra.
