"""When verl must take its last checkpoint before the gang's nodes go away: one rule for both targets.

verl (0.9.1) saves a checkpoint after any step that ends less than its longest step plus a save (60 s by
default) before the epoch time in MLP_CURRENT_CAPACITY_BLOCK_EXPIRATION_TIMESTAMP
(verl/utils/checkpoint/checkpoint_manager.py, should_save_ckpt_esi; verl/trainer/ppo/ray_trainer.py, fit).
That time is when the nodes stop — the Slurm job's end less the time-limit signal's lead, or a Capacity
Block's scale-in — less the longest checkpoint save, so the last save is done before the nodes stop.
"""

from __future__ import annotations

EXPIRATION_VARIABLE = "MLP_CURRENT_CAPACITY_BLOCK_EXPIRATION_TIMESTAMP"


def save_deadline(end_epoch: int, lead_seconds: int, save_seconds: int) -> int:
    """The epoch second verl is told: the nodes' end, less the stop signal's lead and the longest save."""
    return end_epoch - lead_seconds - save_seconds
