"""accounting.sh: each tenant's account and QOS with its GPU quota, as sacctmgr (Slurm 22.05) spells them."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from grpo_infra.slurmgen import ACCOUNTING_PATH, SBATCH_PATH, render_files
from grpo_infra.spec import Environment
from tests.slurm.variants import stack, variant

WITH_SLURMDBD = {
    "onprem-slurm": stack("onprem-slurm"),
    "local-slurm+slurmdbd": variant("local-slurm", lambda d: d["slurm"].update(accounting="slurmdbd")),
}

SHELLCHECK = Path(sys.executable).with_name("shellcheck")


def _commands(script: str) -> list[str]:
    return [line for line in script.splitlines() if "sacctmgr -i " in line and not line.startswith("#")]


def test_onprem_tenants_get_their_account_and_qos_with_their_quota() -> None:
    script = render_files(stack("onprem-slurm"))[ACCOUNTING_PATH]
    # sacctmgr(1): `add qos <name>`, `modify qos where name=<name> set GrpTRES=<tres>=<n>`,
    # `add account <name> Cluster=<c>`, `modify account where ... set QOS=<list> DefaultQOS=<qos>`.
    assert _commands(script) == [
        'known cluster cluster "$cluster" || sacctmgr -i add cluster "$cluster"',
        "known qos name grpo-high || sacctmgr -i add qos grpo-high",
        "sacctmgr -i modify qos where name=grpo-high set GrpTRES=gres/gpu=96",
        'known account account alignment || sacctmgr -i add account alignment Cluster="$cluster" '
        "Description='grpo tenant alignment'",
        'sacctmgr -i modify account where name=alignment cluster="$cluster" set QOS=grpo-high DefaultQOS=grpo-high',
        "known qos name grpo-normal || sacctmgr -i add qos grpo-normal",
        "sacctmgr -i modify qos where name=grpo-normal set GrpTRES=gres/gpu=32",
        'known account account research || sacctmgr -i add account research Cluster="$cluster" '
        "Description='grpo tenant research'",
        'sacctmgr -i modify account where name=research cluster="$cluster" set QOS=grpo-normal DefaultQOS=grpo-normal',
    ]
    assert "cluster=hpc1\n" in script


@pytest.mark.parametrize("name", WITH_SLURMDBD)
def test_the_sbatch_submits_to_a_qos_the_script_creates(name: str) -> None:
    files = render_files(WITH_SLURMDBD[name])
    qos = next(line.split("=", 1)[1] for line in files[SBATCH_PATH].splitlines() if line.startswith("#SBATCH --qos="))
    account = next(
        line.split("=", 1)[1] for line in files[SBATCH_PATH].splitlines() if line.startswith("#SBATCH --account=")
    )
    assert f"sacctmgr -i add qos {qos}" in files[ACCOUNTING_PATH]
    assert f"set QOS={qos} DefaultQOS={qos}" in files[ACCOUNTING_PATH]
    assert f"sacctmgr -i add account {account} " in files[ACCOUNTING_PATH]


@pytest.mark.parametrize("name", WITH_SLURMDBD)
def test_script_is_shellcheck_clean(name: str, tmp_path: Path) -> None:
    path = tmp_path / "accounting.sh"
    path.write_text(render_files(WITH_SLURMDBD[name])[ACCOUNTING_PATH])
    proc = subprocess.run([str(SHELLCHECK), "--severity=style", str(path)], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout


def test_without_slurmdbd_no_gres_tres_and_no_script() -> None:
    """slurmctld 22.05 refuses to start with a gres TRES and no slurmdbd ("fatal: slurmdbd is required to
    run with TRES gres/gpu"), so a cluster without one gets neither the line nor the script."""
    env: Environment = stack("local-slurm")
    files = render_files(env)
    assert ACCOUNTING_PATH not in files
    assert "AccountingStorageTRES" not in "".join(
        line for line in files["slurm/slurm.conf"].splitlines() if not line.startswith("#")
    )
