"""The cluster DNS's records, read from the API server: Debian's dnsmasq serves them, this keeps
them current.

Kubernetes' DNS specification (kubernetes/dns `docs/specification.md`, schema 1.1.0) names each
Service `<service>.<namespace>.svc.<domain>`: its cluster IP, or for a headless Service the
address of each ready endpoint, plus `<hostname>.<service>.<namespace>.svc.<domain>` for an
endpoint with a hostname. The records are written as a hosts file into a directory that dnsmasq
watches (`--hostsdir`, re-read on change by inotify), replaced atomically, once a second when
something changed.

Run as `python -m grpo_infra.kube.dnsfeed --kubeconfig-dir PKI --server URL --hosts-dir DIR`.
"""

from __future__ import annotations

import argparse
import json
import ssl
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

from .nodes import CLUSTER_DOMAIN


def records(services: dict[str, Any], slices: dict[str, Any], domain: str = CLUSTER_DOMAIN) -> list[tuple[str, str]]:
    """(address, name) pairs of the DNS specification's A records for Services."""
    out: list[tuple[str, str]] = []
    headless: set[tuple[str, str]] = set()
    for svc in services.get("items", []):
        meta, spec = svc["metadata"], svc.get("spec", {})
        name = f"{meta['name']}.{meta['namespace']}.svc.{domain}"
        ip = spec.get("clusterIP")
        if ip == "None":
            headless.add((meta["namespace"], meta["name"]))
        elif ip:
            out.append((ip, name))
    for eps in slices.get("items", []):
        meta = eps["metadata"]
        service = meta.get("labels", {}).get("kubernetes.io/service-name")
        if (meta["namespace"], service) not in headless:
            continue
        name = f"{service}.{meta['namespace']}.svc.{domain}"
        for endpoint in eps.get("endpoints") or []:
            if endpoint.get("conditions", {}).get("ready") is False:
                continue
            for address in endpoint.get("addresses", []):
                out.append((address, name))
                if endpoint.get("hostname"):
                    out.append((address, f"{endpoint['hostname']}.{name}"))
    return sorted(set(out))


def hosts_text(pairs: list[tuple[str, str]]) -> str:
    return "".join(f"{address} {name}\n" for address, name in pairs)


def _get(url: str, ctx: ssl.SSLContext) -> dict[str, Any]:
    with urllib.request.urlopen(url, context=ctx, timeout=5) as resp:
        return json.loads(resp.read())


def run(pki: Path, server: str, hosts_dir: Path, interval: float = 1.0) -> None:
    ctx = ssl.create_default_context(cafile=str(pki / "ca.crt"))
    ctx.load_cert_chain(str(pki / "admin.crt"), str(pki / "admin.key"))
    hosts_dir.mkdir(parents=True, exist_ok=True)
    target = hosts_dir / "services"
    last = None
    while True:
        try:
            services = _get(f"{server}/api/v1/services", ctx)
            slices = _get(f"{server}/apis/discovery.k8s.io/v1/endpointslices", ctx)
        except (urllib.error.URLError, OSError, ValueError) as exc:
            print(f"dnsfeed: {exc}", flush=True)
            time.sleep(interval)
            continue
        text = hosts_text(records(services, slices))
        if text != last:
            tmp = hosts_dir / ".services.tmp"
            tmp.write_text(text)
            tmp.replace(target)
            last = text
        time.sleep(interval)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pki", type=Path, required=True)
    parser.add_argument("--server", required=True)
    parser.add_argument("--hosts-dir", type=Path, required=True)
    args = parser.parse_args(argv)
    run(args.pki, args.server, args.hosts_dir)
    return 0


if __name__ == "__main__":
    sys.exit(main())
