#!/bin/bash
# Slurm accounting for cluster hpc1: each tenant's account, and the QOS it submits to with its GPU quota.
# Rendered by grpo-infra from the stack; edit the stack's `tenants`, not this file.
#
# Review, then run once as a Slurm administrator on a host that reaches slurmdbd:  bash accounting.sh
# `add` is run only for what does not exist (sacctmgr exits 1 on "Nothing new added"); `modify` sets the
# quota and the account's QOS each time. Running it again changes nothing that is already right. It needs, in slurm.conf:
#   AccountingStorageType=accounting_storage/slurmdbd
#   AccountingStorageTRES=gres/gpu     (in the rendered fragment)
#   AccountingStorageEnforce=associations,limits,qos   (without `limits` and `qos` no quota holds)
# Then add each person to their tenant's account:  sacctmgr -i add user <login> Account=<tenant>
#
#   tenant alignment: account alignment, QOS grpo-high, GrpTRES=gres/gpu=96
#   tenant research: account research, QOS grpo-normal, GrpTRES=gres/gpu=32
set -euo pipefail

cluster=hpc1

# True when sacctmgr lists an entity of this kind and name (`show` prints nothing for an unknown one);
# the field that names it: Cluster for a cluster, Account for an account, Name for a QOS.
known() {
  local kind=$1 field=$2 name=$3 listed
  listed=$(sacctmgr --noheader --parsable2 show "$kind" where name="$name" format="$field") || return 1
  [[ -n $listed ]]
}

known cluster cluster "$cluster" || sacctmgr -i add cluster "$cluster"
# sacctmgr refuses GrpTRES=gres/gpu=N ("no TRES known by type gres/gpu") until slurmctld, reading
# AccountingStorageTRES=gres/gpu, has registered the TRES with slurmdbd.
if [[ -z $(sacctmgr --noheader --parsable2 show tres where type=gres name=gpu format=id) ]]; then
  echo "accounting.sh: slurmdbd knows no TRES gres/gpu yet: include the slurm.conf fragment (AccountingStorageTRES), restart slurmctld, then run this again" >&2
  exit 1
fi

# tenant alignment: at most 96 GPUs at once, in partition grpo-h100 or anywhere else
known qos name grpo-high || sacctmgr -i add qos grpo-high
sacctmgr -i modify qos where name=grpo-high set GrpTRES=gres/gpu=96
known account account alignment || sacctmgr -i add account alignment Cluster="$cluster" Description='grpo tenant alignment'
sacctmgr -i modify account where name=alignment cluster="$cluster" set QOS=grpo-high DefaultQOS=grpo-high

# tenant research: at most 32 GPUs at once, in partition grpo-h100 or anywhere else
known qos name grpo-normal || sacctmgr -i add qos grpo-normal
sacctmgr -i modify qos where name=grpo-normal set GrpTRES=gres/gpu=32
known account account research || sacctmgr -i add account research Cluster="$cluster" Description='grpo tenant research'
sacctmgr -i modify account where name=research cluster="$cluster" set QOS=grpo-normal DefaultQOS=grpo-normal

sacctmgr --parsable2 show qos where name=grpo-high,grpo-normal format=name,grptres
sacctmgr --parsable2 show assoc where cluster="$cluster" account=alignment,research format=cluster,account,user,qos,defaultqos
