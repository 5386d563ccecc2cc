#!/usr/bin/env bash
# System packages the local Slurm sandbox needs: Debian's Slurm daemons and client, munge, iproute2
# (ip netns, bridges, veths) and util-linux (nsenter, unshare); slurmdbd and MariaDB for the live test
# of the rendered tenant quotas; debootstrap, umoci, skopeo and runc for the local cluster's images
# (`grpo-infra image build`, the operator images, and running an archive as a node would). The local
# Kubernetes' real nodes: containerd and runc, the CNI plugins, dnsmasq (the cluster DNS), iptables, ipset
# (kube-router's NetworkPolicy firewall),
# gcc and libc6-dev (the static pause binary), and busybox-static (the tests' tools image). Idempotent: returns at once when all
# of them are installed; otherwise one `apt-get update` and one `apt-get install`.
set -euo pipefail

packages=(slurmctld slurmd slurm-client munge iproute2 util-linux procps slurmdbd mariadb-server
  debootstrap umoci skopeo runc
  containerd containernetworking-plugins dnsmasq-base iptables ipset gcc libc6-dev busybox-static)

missing=()
for pkg in "${packages[@]}"; do
  status=$(dpkg-query -W -f='${db:Status-Status}' "$pkg" 2>/dev/null || true)
  if [ "$status" != "installed" ]; then
    missing+=("$pkg")
  fi
done

if [ "${#missing[@]}" -eq 0 ]; then
  exit 0
fi

if [ "$(id -u)" -ne 0 ]; then
  echo "install-system-deps: missing ${missing[*]}; run as root: apt-get install -y --no-install-recommends ${missing[*]}" >&2
  exit 1
fi

echo "install-system-deps: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
# The packages' maintainer scripts try to start services; there is no init system to start them
# here, and the sandbox starts its own daemons, so a policy-rc.d denies those starts for this run.
policy=/usr/sbin/policy-rc.d
if [ ! -e "$policy" ]; then
  printf '#!/bin/sh\nexit 101\n' >"$policy"
  chmod 755 "$policy"
  trap 'rm -f "$policy"' EXIT
fi
apt-get -o DPkg::Lock::Timeout=600 install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
