#!/bin/bash
# Ray worker of GRPO job grpo-sandbox on hand-picked machines: run on each of the other 2 machines.
# Rendered by grpo-infra from the stack; edit the stack and re-run `grpo-infra synth`, not this file.
#
#   ./worker.sh start HEAD_ADDRESS   join this run's Ray head (the address ./head.sh start printed)
#   ./worker.sh stop                 stop this run's Ray on this machine
#
# Environment, read at run time: GRPO_RUN_ID, GRPO_NUM_GPUS, GRPO_RAY_TMPDIR as for head.sh, and
#   RAY_AUTH_TOKEN          the run's token; when unset, read from $GRPO_RAY_TMPDIR/grpo-ray-<run>/ray-auth-token
set -uo pipefail

# --- grpo ray lifecycle: the one implementation of a job's Ray node, the same on every launch path ---
# Rendered by grpo-infra from grpo_infra/lifecycle/ray_node.sh.j2 (docs/architecture.md, "The Ray node
# lifecycle"): port block, address, NCCL/Gloo interfaces, Ray start, readiness barrier, stop, checkpoint step.
log() { printf 'grpo %s [%s] %s\n' "$(date +%H:%M:%S)" "${SLURMD_NODENAME:-$(hostname)}" "$*" >&2; }
# The reason stays in GRPO_FAILURE: the sbatch's last line, its outcome, says it again.
fail() { log "ERROR: $*"; export GRPO_FAILURE="$*"; exit 1; }

# ray_port_block RUN: this run's ports, from grpo_infra/ports.py: range 30000-32767 holds
# 10 blocks of 256 ports; run R takes block R mod 10.
ray_port_block() {
  [[ $1 =~ ^[0-9]+$ ]] || fail "the run id must be a whole number, not '$1'"
  ray_port_base=$(( 30000 + ($1 % 10) * 256 ))
  GRPO_RAY_GCS_PORT=$(( ray_port_base + 0 ))
  GRPO_RAY_DASHBOARD_PORT=$(( ray_port_base + 1 ))
  GRPO_RAY_CLIENT_PORT=$(( ray_port_base + 2 ))
  GRPO_RAY_NODE_MANAGER_PORT=$(( ray_port_base + 3 ))
  GRPO_RAY_OBJECT_MANAGER_PORT=$(( ray_port_base + 4 ))
  GRPO_RAY_RUNTIME_ENV_AGENT_PORT=$(( ray_port_base + 5 ))
  GRPO_RAY_DASHBOARD_AGENT_GRPC_PORT=$(( ray_port_base + 6 ))
  GRPO_RAY_DASHBOARD_AGENT_HTTP_PORT=$(( ray_port_base + 7 ))
  GRPO_RAY_METRICS_EXPORT_PORT=$(( ray_port_base + 8 ))
  GRPO_RAY_AUTOSCALER_METRICS_PORT=$(( ray_port_base + 9 ))
  GRPO_RAY_DASHBOARD_METRICS_PORT=$(( ray_port_base + 10 ))
  GRPO_RAY_STOP_ORDER_PORT=$(( ray_port_base + 11 ))
  GRPO_RAY_MIN_WORKER_PORT=$(( ray_port_base + 16 ))
  GRPO_RAY_MAX_WORKER_PORT=$(( ray_port_base + 255 ))
  export GRPO_RAY_GCS_PORT GRPO_RAY_DASHBOARD_PORT GRPO_RAY_CLIENT_PORT GRPO_RAY_NODE_MANAGER_PORT GRPO_RAY_OBJECT_MANAGER_PORT GRPO_RAY_RUNTIME_ENV_AGENT_PORT GRPO_RAY_DASHBOARD_AGENT_GRPC_PORT GRPO_RAY_DASHBOARD_AGENT_HTTP_PORT GRPO_RAY_METRICS_EXPORT_PORT GRPO_RAY_AUTOSCALER_METRICS_PORT GRPO_RAY_DASHBOARD_METRICS_PORT GRPO_RAY_STOP_ORDER_PORT GRPO_RAY_MIN_WORKER_PORT GRPO_RAY_MAX_WORKER_PORT
}

# ray_ports_clear NODE LOW HIGH: nothing, status 0, when the kernel can hand none of Ray's ports LOW..HIGH to an
# outgoing connection on this node; else one line saying which and what to do, status 1. The kernel picks a
# client socket's local port (connect(), or bind() to port 0) from net.ipv4.ip_local_port_range, leaving out
# net.ipv4.ip_local_reserved_ports ("These ports will not be used by automatic port assignments ... Explicit
# port allocation behavior is unchanged": Documentation/networking/ip-sysctl.rst), so a port of the range that
# is not reserved can be taken before Ray binds it, and Ray's bind fails; Ray binds its own ports explicitly,
# so a reserved port stays Ray's. Both settings belong to the network namespace: a Slurm step, a launcher's
# node and a host-networked pod read the host's, a pod with its own network its own (a new namespace starts
# at 32768 60999). Read here at every start: some GPU node images widen the range (9000 65000 on DGX and
# GB200 images), past the stock 32768-60999 that `grpo-infra check` assumes.
ray_ports_clear() {
  local node=$1 low=$2 high=$3 sys=/proc/sys/net/ipv4 first last reserved="" range port from to taken=0 a="" b=""
  if ! read -r first last 2>/dev/null <"$sys/ip_local_port_range" || [[ ! $first =~ ^[0-9]+$ || ! $last =~ ^[0-9]+$ ]]; then
    echo "cannot read $sys/ip_local_port_range on $node to check Ray's ports $low-$high against it"
    return 1
  fi
  read -r reserved 2>/dev/null <"$sys/ip_local_reserved_ports" || reserved=""
  from=$(( low > first ? low : first )) to=$(( high < last ? high : last ))
  for (( port = from; port <= to; port++ )); do
    for range in ${reserved//,/ }; do
      # A reserved range "A-B" or port "A": skip past it.
      if (( port >= ${range%-*} && port <= ${range#*-} )); then
        port=${range#*-}
        continue 2
      fi
    done
    taken=$(( taken + 1 )) b=$port
    [[ -n $a ]] || a=$port
  done
  (( taken == 0 )) && return 0
  echo "Ray's ports $low-$high overlap the ephemeral port range $first-$last of node $node (net.ipv4.ip_local_port_range):" \
    "$taken of them ($a-$b) are not in net.ipv4.ip_local_reserved_ports, and any outgoing connection can take one" \
    "before Ray binds it; add $low-$high to net.ipv4.ip_local_reserved_ports on the node, or give Ray ports outside $first-$last"
  return 1
}

# The interface that carries IPv4 address $1 on this host (empty when `ip` is missing).
interface_of() {
  command -v ip >/dev/null 2>&1 || return 0
  ip -4 -o addr show 2>/dev/null | awk -v want="$1" '{split($4, a, "/"); if (a[1] == want) {print $2; exit}}'
}

# ray_node_address INTERFACE [GIVEN]: prints "ADDRESS INTERFACE" for this node's Ray: the IPv4 address of
# INTERFACE, else GIVEN (the launcher's address for the node), else what the hostname resolves to; never
# a loopback address or 0.0.0.0. The second word is the interface that carries the address.
ray_node_address() {
  local interface=$1 given=${2:-} node=${SLURMD_NODENAME:-$(hostname)} addr="" how
  if [[ -n $interface ]] && command -v ip >/dev/null 2>&1; then
    addr=$(ip -4 -o addr show dev "$interface" 2>/dev/null | awk '{split($4, a, "/"); print a[1]; exit}')
  fi
  if [[ -n $addr ]]; then
    log "$node uses $addr of interface $interface"
  else
    if [[ -n $given ]]; then
      addr=$given how="the address the launcher gave"
    else
      addr=$(getent ahostsv4 "$(hostname)" 2>/dev/null | awk '$1 !~ /^127\./ {print $1; exit}')
      how="the address $(hostname) resolves to"
      [[ -n $addr ]] || fail "no address for Ray on $node: interface ${interface:-(none)} has no IPv4 address and $(hostname) resolves to no non-loopback address"
    fi
    if [[ -n $interface ]]; then
      log "interface $interface has no IPv4 address on $node; falling back to $addr, $how"
    else
      log "$node uses $addr, $how"
    fi
  fi
  [[ $addr != 0.0.0.0 && $addr != 127.* ]] || fail "refusing to bind Ray to $addr on $node"
  printf '%s %s\n' "$addr" "$(interface_of "$addr")"
}

# ray_socket_interfaces INTERFACE: NCCL's and Gloo's sockets on INTERFACE (the one carrying this node's Ray
# address) when the stack set none, or set the Ray interface and this node fell back to another one; without
# them NCCL picks an interface of its own on a multi-NIC node. Interfaces the fabric names stay as they are.
ray_socket_interfaces() {
  local found=$1 ray_if=${GRPO_RAY_INTERFACE:-}
  [[ -n $found ]] || return 0
  if [[ -z ${NCCL_SOCKET_IFNAME:-} || ( $NCCL_SOCKET_IFNAME == "=$ray_if" && $found != "$ray_if" ) ]]; then
    export NCCL_SOCKET_IFNAME="=$found"
  fi
  if [[ -z ${GLOO_SOCKET_IFNAME:-} || ( $GLOO_SOCKET_IFNAME == "$ray_if" && $found != "$ray_if" ) ]]; then
    export GLOO_SOCKET_IFNAME=$found
  fi
}

# True once something answers on host $1, port $2.
port_open() { (exec 3<>"/dev/tcp/$1/$2") 2>/dev/null; }

# ray_start_args ROLE ADDRESS TEMP_DIR CPUS GPUS [HEAD_ADDRESS]: this job's `ray start` options for this
# node, in the array ray_args (and, on the head, the metrics servers' ports in the environment), once the
# node's ephemeral port range is found clear of the run's block (ray_ports_clear; else the job fails with
# its line). Every port
# Ray binds is in the run's block, the dashboard's too: with
# `--include-dashboard=false` the head still runs the dashboard's API server (Ray 2.60, start_api_server
# in ray/_private/services.py), on --dashboard-port. The dashboard is served when GRPO_RAY_DASHBOARD=1
# (default 1), on ADDRESS or GRPO_RAY_DASHBOARD_HOST.
ray_start_args() {
  local role=$1 addr=$2 temp_dir=$3 cpus=$4 gpus=$5 head=${6:-} why
  why=$(ray_ports_clear "${SLURMD_NODENAME:-$(hostname)}" "$GRPO_RAY_GCS_PORT" "$GRPO_RAY_MAX_WORKER_PORT") || fail "$why"
  ray_args=(
    --node-ip-address="$addr" --num-gpus="$gpus" --temp-dir="$temp_dir"
    --node-manager-port="$GRPO_RAY_NODE_MANAGER_PORT" --object-manager-port="$GRPO_RAY_OBJECT_MANAGER_PORT"
    --runtime-env-agent-port="$GRPO_RAY_RUNTIME_ENV_AGENT_PORT"
    --dashboard-agent-grpc-port="$GRPO_RAY_DASHBOARD_AGENT_GRPC_PORT"
    --dashboard-agent-listen-port="$GRPO_RAY_DASHBOARD_AGENT_HTTP_PORT"
    --metrics-export-port="$GRPO_RAY_METRICS_EXPORT_PORT"
    --min-worker-port="$GRPO_RAY_MIN_WORKER_PORT" --max-worker-port="$GRPO_RAY_MAX_WORKER_PORT"
    --disable-usage-stats --log-style=record --log-color=false
  )
  [[ -z $cpus ]] || ray_args+=(--num-cpus="$cpus")
  # Custom resources as a JSON object, e.g. a disaggregated job's pool of this node ({"grpo_pool:POOL": GPUS}).
  [[ -z ${GRPO_RAY_RESOURCES:-} ]] || ray_args+=(--resources="$GRPO_RAY_RESOURCES")
  if [[ $role == head ]]; then
    ray_args+=(--head --port="$GRPO_RAY_GCS_PORT" --ray-client-server-port="$GRPO_RAY_CLIENT_PORT"
      --dashboard-port="$GRPO_RAY_DASHBOARD_PORT")
    # The autoscaler's and the dashboard's metrics servers listen on fixed ports (44217, 44227) unless told.
    export AUTOSCALER_METRIC_PORT=$GRPO_RAY_AUTOSCALER_METRICS_PORT DASHBOARD_METRIC_PORT=$GRPO_RAY_DASHBOARD_METRICS_PORT
    if [[ ${GRPO_RAY_DASHBOARD:-1} == 1 ]]; then
      ray_args+=(--include-dashboard=true --dashboard-host="${GRPO_RAY_DASHBOARD_HOST:-$addr}")
    else
      ray_args+=(--include-dashboard=false)
    fi
  else
    ray_args+=(--address="$head:$GRPO_RAY_GCS_PORT")
    # A worker's `ray start` looks the head node up in the GCS RAY_NUM_REDIS_GET_RETRIES times, 2 s apart
    # (20 by default: get_all_node_info_until_retrieved in ray/_private/utils.py, Ray 2.60), then gives up;
    # a head whose raylet registers late (a loaded machine) is waited for as long as the readiness barrier.
    export RAY_NUM_REDIS_GET_RETRIES=${RAY_NUM_REDIS_GET_RETRIES:-$(( (${GRPO_RAY_READY_TIMEOUT:-300} + 1) / 2 ))}
  fi
}

# Every process of this job's Ray on this node: those with a file open under the node's temp dir (every
# Ray process logs there, the agents too) and those naming the dir on their command line (`ray start`,
# raylet, gcs_server). Not names alone: Ray's agents retitle themselves (ray::DashboardAgent). The temp
# dir is this job's and this node's, so no other job's Ray is ever found.
ray_pids_under() {
  local dir=$1 proc pid args=() self=()
  mapfile -d '' self 2>/dev/null <"/proc/$$/cmdline"
  {
    # Command lines first, read by bash itself: no helper process of this scan is there to match.
    for proc in /proc/[0-9]*; do
      pid=${proc#/proc/}
      [[ $pid != "$$" && $pid != "${BASHPID:-$$}" ]] || continue
      mapfile -d '' args 2>/dev/null <"$proc/cmdline" || continue
      [[ "${args[*]}" != "${self[*]}" ]] || continue  # a subshell of this very shell
      [[ " ${args[*]} " == *"$dir/"* || " ${args[*]} " == *" $dir "* || " ${args[*]} " == *"=$dir "* ]] && echo "$pid"
    done
    find /proc/[0-9]*/fd -mindepth 1 -maxdepth 1 -lname "$dir/*" 2>/dev/null | cut -d/ -f3
  } | sort -un
}

# Whether a process still runs (a zombie holds nothing and is not waited for).
still_running() {
  local stat
  read -r stat 2>/dev/null <"/proc/$1/stat" || return 1
  stat=${stat##*) }
  [[ ${stat:0:1} != Z ]]
}

# Stop every process of this job's Ray on this node (never `ray stop`: it stops every Ray of the machine):
# TERM (Ray's graceful stop) to all but the GCS at once, then to the GCS, as `ray stop` stops it last
# (RAY_PROCESSES in python/ray/autoscaler/_private/constants.py, Ray 2.60: "GCS SERVER must be the last in
# the list"; the others report to it as they stop), then KILL, with a line naming them, whatever still runs
# after GRPO_RAY_STOP_GRACE seconds. The `ray start` supervisor stops its children one by one, up to a
# second each (kill_all_processes in python/ray/_private/node.py): it goes with the GCS and is ended
# without a word once its children are gone.
stop_ray_under() {
  local dir=$1 grace=${GRPO_RAY_STOP_GRACE:-10} pids pid tick children supervisors round first="" last=""
  pids=$(ray_pids_under "$dir")
  [[ -n $pids ]] || return 0
  for pid in $pids; do
    if grep -qaE -- '/ray start |/gcs_server ' <(tr '\0' ' ' 2>/dev/null <"/proc/$pid/cmdline"); then
      last+=" $pid"
    else
      first+=" $pid"
    fi
  done
  local term=("$first" "$last") watch=("$first" "$pids")
  for round in 0 1; do
    # shellcheck disable=SC2086 # one pid per word
    [[ -z ${term[round]} ]] || kill -TERM ${term[round]} 2>/dev/null
    for (( tick = 0; tick < grace * 20; tick++ )); do
      children="" supervisors=""
      for pid in ${watch[round]}; do
        still_running "$pid" || continue
        if grep -qa -- '/ray start ' <(tr '\0' ' ' 2>/dev/null <"/proc/$pid/cmdline"); then
          supervisors+=" $pid"
        else
          children+=" $pid"
        fi
      done
      [[ -n $children ]] || break
      sleep 0.05
    done
  done
  # shellcheck disable=SC2086 # one pid per word
  [[ -n $children ]] || { [[ -z $supervisors ]] || kill -KILL $supervisors 2>/dev/null; }
  local left=() names=() name
  for pid in $(ray_pids_under "$dir"); do
    still_running "$pid" || continue
    left+=("$pid")
    read -r name 2>/dev/null <"/proc/$pid/comm" && names+=("$name")
  done
  (( ${#left[@]} > 0 )) || return 0
  log "this job's Ray on ${SLURMD_NODENAME:-$(hostname)}: ${#left[@]} process(es) still running $grace s after TERM (${names[*]}); killing them"
  kill -KILL "${left[@]}" 2>/dev/null
  return 0
}

# port_answers HOST PORT: something takes a connection on HOST:PORT within 2 s (a dead host never answers).
port_answers() { timeout 2 bash -c "exec 3<>/dev/tcp/$1/$2" 2>/dev/null; }

# INT is the batch script's order to stop (stop_job_ray: `scancel --signal=INT`), or one Slurm replays:
# slurmctld resends a signal to a node that did not answer it once the node answers again (signal_step_tasks
# queues it with retry=1; _queue_agent_retry, src/slurmctld/agent.c, Slurm 22.05), and a requeued job keeps
# its job and step ids, so an earlier run's INT can reach this run's Ray. The order is this run's while the
# head's stop port answers (the batch script opens it first: stop_order.py); an INT without it is named and
# ignored.
ray_node_interrupted() {
  if ! port_answers "$head" "$GRPO_RAY_STOP_ORDER_PORT"; then
    log "INT on $node without a stop order on the head's port $GRPO_RAY_STOP_ORDER_PORT: a signal Slurm replayed from an earlier run of job ${SLURM_JOB_ID:-?}; ignored"
    return 0
  fi
  exec 2>/dev/null
  stop_ray_under "$temp_dir"
  exit 0
}

# A `ray start` gives up on a loaded machine for reasons that pass: a worker's when the head's GCS answers late
# (its first call to the GCS gives up after about 5 s, "Failed to connect to GCS", ray/_private/state.py; measured
# with a stalled GCS), and any node's when its raylet does not register within 30 s ("The current node timed out
# during startup": raylet_start_wait_time_s in ray/_private/node.py, a constant, not a setting, ray-project/ray#47087;
# Ray 2.60). A GCS that many nodes join at once, or a head machine under load, answers later than that. A head
# started again is a new GCS, which a worker's start against the first one never reaches: run_ray_node stops it
# once the first one is gone (watch_head_gcs). Each is tried again, after stopping what the failed start left,
# until the readiness deadline; any other failure is not. ray_start_again ROLE TEMP_DIR DEADLINE: true, once what
# the failed start left is stopped, when the start whose output is in TEMP_DIR/ray-start.log is to be tried again.
# Only a caller that watches every node's Ray until the deadline (run_ray_node) may start a head again:
# elsewhere its workers would not follow it.
ray_start_again() {
  local reason pattern='timed out during startup'
  [[ $1 == head ]] || pattern+='|Failed to connect to GCS'
  (( SECONDS < $3 )) || return 1
  if [[ -s $2/head-gone ]]; then
    reason=$(<"$2/head-gone")
  else
    reason=$(grep -oE -m1 "$pattern" "$2/ray-start.log" 2>/dev/null) || return 1
    case $reason in
      "timed out during startup") reason="its raylet did not register in time: $reason" ;;
      *) reason="gave up waiting for the head's GCS: $reason" ;;
    esac
  fi
  log "Ray $1 on ${SLURMD_NODENAME:-$(hostname)} stopped while it joined ($reason); stopping what it left and starting again"
  stop_ray_under "$2"
}

# watch_head_gcs RAY_PID HEAD TEMP_DIR DEADLINE: until the readiness deadline, once a second, whether the head's
# GCS still takes connections (a stalled one does: the kernel answers for it); when it no longer does, the head
# was started again (ray_start_again) and this worker's `ray start` (pid RAY_PID) would wait on the old one
# until Ray's own lookups give up, minutes later: it is stopped, the reason left in TEMP_DIR/head-gone.
watch_head_gcs() {
  while (( SECONDS < $4 )) && kill -0 "$1" 2>/dev/null; do
    if ! port_open "$2" "$GRPO_RAY_GCS_PORT"; then
      printf "the head's GCS at %s:%s was gone\n" "$2" "$GRPO_RAY_GCS_PORT" >"$3/head-gone"
      kill -TERM "$1" 2>/dev/null
      return 0
    fi
    sleep 1
  done
}

# run_ray_node ROLE ADDRESS TEMP_DIR CPUS GPUS [HEAD_ADDRESS]: this node's Ray in the foreground, for as long
# as it runs. A worker waits until the head's GCS answers (a TCP connect every 50 ms), so its `ray start`
# overlaps the head's. TERM stops all of this node's Ray (also what escaped) and ends it without an error, as
# INT does when it is this run's order (ray_node_interrupted); Ray stopping by itself ends it with one line
# naming the node, "Ray <role> on <node> stopped by itself", and the end of Ray's start-up log.
run_ray_node() {
  local role=$1 addr=$2 temp_dir=$3 head=${6:-} node=${SLURMD_NODENAME:-$(hostname)} ray_pid rc deadline watcher=""
  stop_ray_under "$temp_dir"  # leftovers of an earlier run of this job id (a requeue)
  mkdir -p "$temp_dir" || fail "cannot create Ray temp dir $temp_dir on $node"
  trap 'exec 2>/dev/null; stop_ray_under "$temp_dir"; exit 0' TERM
  trap ray_node_interrupted INT
  ray_start_args "$@"
  deadline=$(( SECONDS + ${GRPO_RAY_READY_TIMEOUT:-300} ))
  while :; do
    if [[ $role != head ]]; then
      until port_open "$head" "$GRPO_RAY_GCS_PORT"; do sleep 0.05; done
    fi
    log "starting Ray $role at $addr with ${4:-all} CPUs, $5 GPUs, temp dir $temp_dir"
    # No drain on TERM: it only lets Ray Serve proxies finish requests (node.py, _drain_node_before_shutdown).
    rm -f "$temp_dir/head-gone"
    RAY_GRACEFUL_SHUTDOWN_DRAIN_TIMEOUT_S=0 ray start "${ray_args[@]}" --block >"$temp_dir/ray-start.log" 2>&1 &
    ray_pid=$!
    [[ $role == head ]] || { watch_head_gcs "$ray_pid" "$head" "$temp_dir" "$deadline" & watcher=$!; }
    # An ignored INT ends `wait` early; the wait goes on for as long as `ray start` runs.
    wait "$ray_pid"
    rc=$?
    while (( rc > 128 )) && kill -0 "$ray_pid" 2>/dev/null; do
      wait "$ray_pid"
      rc=$?
    done
    [[ -z $watcher ]] || kill "$watcher" 2>/dev/null
    ray_start_again "$role" "$temp_dir" "$deadline" || break
  done
  log "Ray $role on $node stopped by itself with status $rc; the end of $temp_dir/ray-start.log:"
  tail -n 20 "$temp_dir/ray-start.log" | sed 's/^/    /' >&2
  stop_ray_under "$temp_dir"
  return $(( rc == 0 ? 1 : rc ))
}

# The readiness barrier (grpo_infra/lifecycle/ray_ready.py), for `python3 -c "$ray_ready_program"`:
# every node and GPU joined, or exit 1 at the timeout with the counts and the missing nodes.
ray_ready_program=$(cat <<'PYTHON'
"""Readiness barrier of the GRPO sbatch: wait until every node and every GPU has joined Ray.

The sbatch embeds this file and runs it with `python3 -c` at the same moment as it starts the job's
Ray cluster, so its interpreter start and `import ray` overlap the head's start-up; it waits for the
head's GCS port itself. Training starts the moment the cluster is whole, not after a guessed sleep.
It prints a line each time the count changes ("joined 2/3 nodes, 16/24 GPUs") and exits 1 at the
timeout with the counts and the nodes still missing. Standard library and Ray only: it runs inside
the image.

The count comes from the GCS's node table over Ray's own GCS client (`ray._raylet.GcsClient`, as
`ray status` uses it: python/ray/scripts/scripts.py line 2392, Ray 2.60), not from a Ray driver:
`ray.init` would wait for this node's raylet, polling the process table once a second
(get_node_to_connect_for_driver, python/ray/_private/services.py lines 512-581), and the raylet answers a first
driver by starting idle worker processes, CPU the other nodes need to start in the meantime.

With `--gate MODULE ARGS...` it then connects as a driver and runs the fabric gate
(`MODULE.main(ARGS)`, the in-job all-reduce) in this same process, on this same connection: one
interpreter start and one `import ray` between a whole cluster and training. Exit 0: ready (and the
gate passed); 1: not ready; 3: the gate failed (its verdict printed above).
"""

import argparse
import importlib
import socket
import sys
import time

GATE_FAILED = 3
# Seconds between two looks at the node table, and between two connection attempts to the GCS port.
POLL_SECONDS = 0.1
GCS_CONNECT_POLL_SECONDS = 0.05


def wait_for_port(address: str, deadline: float) -> bool:
    """True once something accepts a TCP connection at host:port, False at the deadline."""
    host, _, port = address.rpartition(":")
    while True:
        try:
            with socket.create_connection((host, int(port)), timeout=1):
                return True
        except OSError:
            if time.monotonic() > deadline:
                return False
            time.sleep(GCS_CONNECT_POLL_SECONDS)


def connect(address: str):
    """A GCS client of the head at `address`, or None while it cannot answer."""
    from ray._raylet import GcsClient

    try:
        return GcsClient(address=address)
    except Exception:
        return None


def alive_nodes(gcs) -> list | None:
    """The GCS's alive nodes (GcsNodeInfo), or None when it does not answer. A client keeps the cluster id of
    the GCS it first reached, so a head started again while the nodes join (ray_start_again) answers only a new
    client."""
    from ray.core.generated.gcs_pb2 import GcsNodeInfo

    if gcs is None:
        return None
    try:
        return list(gcs.get_all_node_info(timeout=5, state_filter=GcsNodeInfo.GcsNodeState.ALIVE).values())
    except Exception:
        return None


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--address", required=True, help="GCS address host:port of this job's head")
    parser.add_argument("--nodes", type=int, required=True, help="nodes the allocation has")
    parser.add_argument("--gpus", type=int, required=True, help="GPUs the allocation has in all")
    parser.add_argument("--timeout", type=float, required=True, help="seconds before giving up")
    parser.add_argument("--hosts", default="", help="comma-separated node names, to name the missing ones")
    parser.add_argument(
        "--node-ip-address", default=None, help="this node's Ray address (spares Ray's IP auto-detection)"
    )
    parser.add_argument("--gate", nargs=argparse.REMAINDER, default=None, help="then run MODULE.main(ARGS...)")
    args = parser.parse_args()
    deadline = time.monotonic() + args.timeout

    import ray

    if not wait_for_port(args.address, deadline):
        print(f"grpo: ERROR: cannot reach this job's Ray head at {args.address}", file=sys.stderr, flush=True)
        return 1
    gcs = connect(args.address)

    last = None
    nodes, gpus, alive = 0, 0, []
    while True:
        answer = alive_nodes(gcs)
        if answer is None:
            gcs = connect(args.address)  # the counts stay the last ones the head told
        else:
            alive = answer
        nodes, gpus = len(alive), int(sum(n.resources_total.get("GPU", 0) for n in alive))
        if (nodes, gpus) != last:
            print(f"grpo: joined {nodes}/{args.nodes} nodes, {gpus}/{args.gpus} GPUs", flush=True)
            last = (nodes, gpus)
        if nodes >= args.nodes and gpus >= args.gpus:
            return run_gate(ray, args) if args.gate else 0
        if time.monotonic() > deadline:
            break
        time.sleep(POLL_SECONDS)

    joined = {n.node_manager_hostname.split(".")[0] for n in alive}
    missing = [h for h in args.hosts.split(",") if h and h.split(".")[0] not in joined]
    if len(missing) != args.nodes - nodes:
        missing = []  # Ray's hostnames are not the Slurm node names here: naming nodes would mislead
    print(
        f"grpo: ERROR: Ray readiness timeout after {args.timeout:g} s: joined {nodes}/{args.nodes} nodes, "
        f"{gpus}/{args.gpus} GPUs" + (f"; missing: {','.join(missing)}" if missing else ""),
        file=sys.stderr,
        flush=True,
    )
    return 1


def run_gate(ray, args: argparse.Namespace) -> int:
    """The cluster is whole: connect as a driver and run the gate on this connection."""
    try:
        ray.init(
            address=args.address,
            logging_level="ERROR",
            log_to_driver=False,
            _node_ip_address=args.node_ip_address,
        )
    except (ConnectionError, RuntimeError) as exc:
        print(f"grpo: ERROR: cannot reach this job's Ray head at {args.address}: {exc}", file=sys.stderr)
        return 1
    try:
        gate = importlib.import_module(args.gate[0])
        code = gate.main([*args.gate[1:], "--address", args.address])
    finally:
        ray.shutdown()
    return 0 if code == 0 else GATE_FAILED


if __name__ == "__main__":
    sys.exit(main())
PYTHON
)

# The resume rule (grpo_infra/lifecycle/resume.py), for `python3 -c "$resume_program" --checkpoint-dir DIR
# --identity JSON [-- COMMAND...]`: a checkpoint directory of another experiment is refused in one line.
# shellcheck disable=SC2034 # the `ray` launcher's node scripts leave it unused (its job ships it as a module)
resume_program=$(cat <<'PYTHON'
"""The resume rule, one program for every path: a checkpoint directory belongs to one experiment, and a
resumed run must advance.

1. Identity. verl 0.9.1 resumes from whatever `latest_checkpointed_iteration.txt` names in
   `trainer.default_local_dir` (`resume_mode: auto`; verl/trainer/ppo/ray_trainer.py:1052-1083,
   verl/utils/checkpoint/checkpoint_manager.py:222-259 `find_latest_ckpt_path`): it cannot tell its own
   checkpoints from another experiment's that reused the job name (and so the directory). The first run
   writes the experiment's identity (`IDENTITY_FILE`, rendered by `grpo_infra.training.experiment_identity`)
   beside the checkpoints; a later run of another experiment is refused in one line naming what differs,
   before verl starts. A directory holding checkpoints but no identity is refused too: whose they are is
   unknown.
2. Advance. verl has shipped bugs where a run resumed at an epoch boundary exited 0 without training; a
   requeued or retried job would then be reported COMPLETED/SUCCEEDED having trained nothing. The tracker
   is read before and after the command; exit 0 after resuming at step N > 0 with no step after N is
   turned into 1, said in one line. A fresh run (no checkpoint at start) is never judged.
3. Finished. A run that exits 0 having trained (fresh, or advanced past its start) records the step it
   ended at (`FINISHED_FILE`). A later run of the same experiment that resumes at exactly that step has
   nothing left to train, and its exit 0 is kept: a retry after training finished (a RayJob attempt failed
   by its submitter after the driver ended, a Slurm requeue after the last step) then succeeds instead of
   failing every retry. A checkpoint whose run never exited 0 (it died after saving) is still judged,
   unless it is the experiment's last step (`last_step` in the identity, when the stack fixes it: the
   probe's steps, verl's `trainer.total_training_steps`): a run evicted between its last save and its exit
   finished the experiment, and the next run, resuming there, has nothing left to train.

    python3 resume.py --checkpoint-dir DIR --identity-file FILE -- COMMAND...   (both rules around COMMAND)
    python3 resume.py --checkpoint-dir DIR --identity JSON                      (the identity rule alone)
    python3 resume.py --checkpoint-dir DIR --judge STEP   (the advance and finished rules, for a command the
                                                           caller ran itself from STEP and that exited 0)

Standard library only and self-contained (no package imports): the Kubernetes head runs this file from a
ConfigMap whatever the image holds (grpo_infra/k8s/shipped.py), the sbatch and the launchers' nodes run its
text with `python3 -c` (the lifecycle library embeds it), and `python3 -m grpo_infra.lifecycle.resume` works
where grpo-infra is installed.
"""

from __future__ import annotations

import argparse
import json
import shlex
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

# verl's checkpoint tracker: the last saved step (verl/trainer/ppo/ray_trainer.py:1046-1050, 0.9.1).
CHECKPOINT_TRACKER = "latest_checkpointed_iteration.txt"
# The experiment a checkpoint directory belongs to, written beside verl's tracker.
IDENTITY_FILE = ".grpo-infra-experiment.json"
# The step a run of this experiment ended at with exit 0, written beside verl's tracker.
FINISHED_FILE = ".grpo-infra-finished-step"
# What to do about a refusal, said in the refusal line.
REMEDY = "set a new job.name for a new experiment, or remove the directory to start this one over"
# Differing fields named in the refusal line, at most.
SHOWN_DIFFERENCES = 3

MODULE = "grpo_infra.lifecycle.resume"


def _step_in(path: Path) -> int | None:
    """The step number a one-line file holds, or None (no file, or not a number)."""
    try:
        text = path.read_text(encoding="utf-8").strip()
    except OSError:
        return None
    return int(text) if text.isdigit() else None


def checkpoint_step(directory: Path) -> int:
    """The last saved step in verl's layout under `directory`; 0 when there is none."""
    return _step_in(directory / CHECKPOINT_TRACKER) or 0


def finished_step(directory: Path) -> int | None:
    """The step an earlier run of this experiment exited 0 at, or None."""
    return _step_in(directory / FINISHED_FILE)


def record_finished(directory: Path, step: int) -> None:
    """Record that a run ended at `step` with exit 0 (atomically: a reader sees the old or the new step)."""
    partial = directory / f"{FINISHED_FILE}.partial"
    partial.write_text(f"{step}\n", encoding="utf-8")
    partial.replace(directory / FINISHED_FILE)


def verdict(
    before: int, after: int, status: int, finished: int | None = None, last: int | None = None
) -> tuple[int, str | None]:
    """The run's exit status and the line saying why, from the steps before and after, the command's status,
    the step an earlier run of the experiment finished at, and the experiment's last step when known."""
    if status != 0 or before == 0 or after > before:
        return status, None  # a failure stays the command's own; a fresh or advanced run is not judged
    if finished == before:
        return 0, f"grpo: the experiment finished at step {before} in an earlier run; nothing was left to train"
    if last is not None and before >= last:
        # An earlier run saved the last step but was stopped before it exited (an eviction, a lost node).
        return 0, f"grpo: an earlier run saved the experiment's last step ({last}); nothing was left to train"
    return 1, (
        f"grpo: ERROR: the run resumed at step {before} and exited 0 without saving a newer step "
        f"(now {after}): it did not train"
    )


def differences(recorded: dict[str, Any], current: dict[str, Any]) -> list[str]:
    """`field: recorded → current` for each field of the experiment that differs, in sorted order."""
    old, new = recorded.get("fields", {}), current.get("fields", {})
    out = []
    for key in sorted(set(old) | set(new)):
        if old.get(key) != new.get(key):
            out.append(f"{key}: {json.dumps(old.get(key, '(absent)'))} → {json.dumps(new.get(key, '(absent)'))}")
    return out


def identity_refusal(directory: Path, identity: dict[str, Any]) -> str | None:
    """None when `directory` may hold this experiment's checkpoints (recording it when new), else the one line."""
    record = directory / IDENTITY_FILE
    try:
        recorded = json.loads(record.read_text(encoding="utf-8"))
    except FileNotFoundError:
        recorded = None
    except (OSError, ValueError) as error:
        return f"grpo: ERROR: checkpoint dir {directory}: cannot read {IDENTITY_FILE} ({error}); {REMEDY}"
    if recorded is None:
        step = checkpoint_step(directory)
        if step > 0:
            return (
                f"grpo: ERROR: checkpoint dir {directory} holds checkpoints (step {step}) of an unknown "
                f"experiment (no {IDENTITY_FILE}); {REMEDY}"
            )
        directory.mkdir(parents=True, exist_ok=True)
        partial = record.with_name(f"{IDENTITY_FILE}.partial")
        partial.write_text(json.dumps(identity, indent=2, sort_keys=True) + "\n", encoding="utf-8")
        partial.replace(record)
        return None
    if recorded.get("digest") == identity.get("digest"):
        return None
    changed = differences(recorded, identity)
    shown = "; ".join(changed[:SHOWN_DIFFERENCES]) + (
        f"; {len(changed) - SHOWN_DIFFERENCES} more" if len(changed) > SHOWN_DIFFERENCES else ""
    )
    return (
        f"grpo: ERROR: checkpoint dir {directory} belongs to experiment {recorded.get('digest')} "
        f"(job {recorded.get('job')}), not this run's {identity.get('digest')} ({shown or 'another digest'}); {REMEDY}"
    )


def guarded(
    checkpoint_dir: str,
    command: str,
    *,
    identity_file: str | None = None,
    identity: str | None = None,
    program: str = f"-m {MODULE}",
) -> str:
    """`command` (a shell command line) run under both rules, as a shell command line; the experiment's
    identity from a file or inline JSON (exactly one)."""
    assert (identity_file is None) != (identity is None), "one of identity_file and identity"
    source = (
        f"--identity-file {shlex.quote(identity_file)}"
        if identity_file
        else f"--identity {shlex.quote(identity or '')}"
    )
    return f"python3 {program} --checkpoint-dir {shlex.quote(checkpoint_dir)} {source} -- {command}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--checkpoint-dir", type=Path, required=True, help="verl's trainer.default_local_dir")
    identity = parser.add_mutually_exclusive_group(required=True)
    identity.add_argument("--identity", help="the experiment's identity, JSON")
    identity.add_argument("--identity-file", type=Path, help="a file holding the experiment's identity, JSON")
    identity.add_argument(
        "--judge", type=int, metavar="STEP", help="judge a command that started at STEP and exited 0 (the sbatch's)"
    )
    parser.add_argument("command", nargs=argparse.REMAINDER, help="-- then the training command")
    args = parser.parse_args(argv)
    if args.judge is not None:
        return judged(args.checkpoint_dir, args.judge, 0, recorded_last_step(args.checkpoint_dir))
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    text = args.identity if args.identity is not None else args.identity_file.read_text(encoding="utf-8")
    identity = json.loads(text)
    refusal = identity_refusal(args.checkpoint_dir, identity)
    if refusal:
        print(refusal, file=sys.stderr, flush=True)
        return 2
    if not command:
        return 0
    before = checkpoint_step(args.checkpoint_dir)
    child = subprocess.Popen(command)
    # A stop of the job (KubeRay deletes the cluster, Ray stops the driver) reaches the trainer.
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda number, _frame: child.send_signal(number))
    return judged(args.checkpoint_dir, before, child.wait(), identity.get("last_step"))


def recorded_last_step(directory: Path) -> int | None:
    """The last step the experiment's recorded identity names (the sbatch's `--judge` has no identity of its own)."""
    try:
        value = json.loads((directory / IDENTITY_FILE).read_text(encoding="utf-8")).get("last_step")
    except (OSError, ValueError, AttributeError):
        return None
    return value if isinstance(value, int) else None


def judged(directory: Path, before: int, status: int, last: int | None = None) -> int:
    """The exit status of a run that started at step `before` and ended with `status`, its line said, and a
    run that trained and exited 0 recorded as finished."""
    after = checkpoint_step(directory)
    code, line = verdict(before, after, status, finished_step(directory), last)
    if line:
        print(line, file=sys.stderr, flush=True)
    if code == 0 and after > before:
        record_finished(directory, after)
    return code


if __name__ == "__main__":
    sys.exit(main())
PYTHON
)

# The last checkpointed training step in verl's layout under $1 (latest_checkpointed_iteration.txt; 0 when none).
checkpoint_step() {
  local step=0
  [[ -r $1/latest_checkpointed_iteration.txt ]] && read -r step <"$1/latest_checkpointed_iteration.txt"
  [[ $step =~ ^[0-9]+$ ]] || step=0
  printf '%s\n' "$step"
}

# checkpoint_advanced BEFORE AFTER: true when a newer step was saved than the one the run started from
# (the one rule the resume check and the crash retry budget both use).
checkpoint_advanced() { (( $2 > $1 )); }
# --- end grpo ray lifecycle ---

# --- grpo launcher node: what the hand-started, SkyPilot and dstack nodes add to the lifecycle ---
# The job's environment on this node, before Ray starts (Ray's workers inherit it); $1 is the node's
# Ray temp dir. Secrets are never here: they come from the environment the script runs in.
grpo_node_environment() {
  local node_temp_dir=$1
  export RAY_USAGE_STATS_ENABLED=0
  export NCCL_IB_DISABLE='1'
  export NCCL_SOCKET_IFNAME='=eth0'
  export GLOO_SOCKET_IFNAME='eth0'
  export TORCH_NCCL_ASYNC_ERROR_HANDLING='3'
  export TORCH_NCCL_ENABLE_MONITORING='1'
  export TORCH_NCCL_HEARTBEAT_TIMEOUT_SEC='480'
  export GRPO_INFRA_COLLECTIVE_TIMEOUT_S='600'
  : "$node_temp_dir"
}

# This node's address (the interface's, else GIVEN), in `addr`, with NCCL's and Gloo's sockets on the
# interface that carries it (ray_socket_interfaces).
grpo_address() {
  local found
  found=$(ray_node_address "${GRPO_RAY_INTERFACE:-}" "${1:-}") || exit 1
  addr=${found%% *}
  ray_socket_interfaces "${found#* }"
}

# Secrets the job needs, checked by name; their values never appear in a file or a command line.
grpo_require_secrets() {
  :
}

# Start this node's Ray in the background (ray start returns once it runs): grpo_start_ray ROLE ADDRESS
# TEMP_DIR GPUS [HEAD_ADDRESS], with the lifecycle's options (ray_start_args).
# A worker whose start gave up while it joined starts again (ray_start_again); a head does not: nothing here
# watches the workers that joined its first GCS, so they would not follow a second one.
grpo_start_ray() {
  local deadline=$(( SECONDS + ${GRPO_RAY_READY_TIMEOUT:-300} )) status
  mkdir -p "$3" || fail "cannot create Ray temp dir $3"
  ray_start_args "$1" "$2" "$3" "" "$4" "${5:-}"
  while :; do
    log "starting Ray $1 at $2 with $4 GPUs, ports $ray_port_base-$GRPO_RAY_MAX_WORKER_PORT, temp dir $3"
    ray start "${ray_args[@]}" >"$3/ray-start.log" 2>&1
    status=$?
    cat "$3/ray-start.log"
    (( status != 0 )) || return 0
    [[ $1 != head ]] && ray_start_again "$1" "$3" "$deadline" || return 1
  done
}

# The readiness wait: every node and every GPU of the gang has joined, or exit 1 at the timeout.
grpo_wait_ready() {
  local address=$1 timeout=${GRPO_RAY_READY_TIMEOUT:-300}
  [[ $timeout =~ ^[0-9]+$ ]] || fail "GRPO_RAY_READY_TIMEOUT must be a whole number of seconds, not '$timeout'"
  python3 -c "$ray_ready_program" --address "$address" --nodes 3 --gpus 24 --timeout "$timeout" \
    || fail "not every node and GPU joined Ray at $address within $timeout s (GRPO_RAY_READY_TIMEOUT)"
  log "ray cluster ready: 3 nodes, 24 GPUs at $address"
}
# --- end grpo launcher node ---

export GRPO_RAY_INTERFACE=eth0
GRPO_RUN_ID=${GRPO_RUN_ID:-0}
ray_port_block "$GRPO_RUN_ID"
run_root="${GRPO_RAY_TMPDIR:-/tmp}/grpo-ray-${GRPO_RUN_ID}"
node=$(hostname -s)
node_temp_dir="$run_root/$node"
token_file="$run_root/ray-auth-token"

start() {
  local head=${1:-} gpus
  [[ $head =~ ^[0-9]+(\.[0-9]+){3}$ ]] || fail "usage: ./worker.sh start HEAD_ADDRESS (the IPv4 address ./head.sh start printed)"
  grpo_require_secrets
  grpo_address
  gpus=${GRPO_NUM_GPUS:-$(nvidia-smi -L 2>/dev/null | grep -c '^GPU ')}
  [[ $gpus == "8" ]] || fail "this machine has ${gpus:-no} GPUs for Ray; the stack's pool has 8 per node (set GRPO_NUM_GPUS to override)"
  export RAY_AUTH_MODE=token
  if [[ -z ${RAY_AUTH_TOKEN:-} ]]; then
    [[ -r $token_file ]] || fail "no RAY_AUTH_TOKEN and no $token_file: copy the head's token file here first"
    RAY_AUTH_TOKEN=$(cat "$token_file")
  fi
  export RAY_AUTH_TOKEN
  unset RAY_AUTH_TOKEN_PATH
  port_open "$head" "$GRPO_RAY_GCS_PORT" || fail "no Ray head of run $GRPO_RUN_ID answers at $head:$GRPO_RAY_GCS_PORT"
  mkdir -p "$run_root" || fail "cannot create $run_root"
  grpo_node_environment "$node_temp_dir"
  grpo_start_ray worker "$addr" "$node_temp_dir" "$gpus" "$head" >"$run_root/$node-start.log" 2>&1 \
    || { cat "$run_root/$node-start.log" >&2; fail "ray start --address=$head:$GRPO_RAY_GCS_PORT failed (log above)"; }
  log "Ray worker of run $GRPO_RUN_ID at $addr joined $head:$GRPO_RAY_GCS_PORT"
}

stop() {
  stop_ray_under "$node_temp_dir"
  rm -f "$run_root/$node-start.log"
  log "stopped run $GRPO_RUN_ID's Ray worker on $node"
}

case ${1:-} in
  start) start "${2:-}" ;;
  stop) stop ;;
  *) printf 'usage: %s start HEAD_ADDRESS | stop\n' "$0" >&2; exit 2 ;;
esac
