"""The Ray pods are reachable from their own namespace and the KubeRay operator only.

The policy is judged by who it admits, following the NetworkPolicy semantics of the Kubernetes API
(https://kubernetes.io/docs/concepts/services-networking/network-policies/, "Behavior of to and from
selectors"): a peer with only `podSelector` means pods of the policy's own namespace; `namespaceSelector`
alone means every pod of the matching namespaces (`{}` matches all); `ipBlock` admits addresses, which
for traffic from outside the cluster means anyone in the CIDR.
"""

from __future__ import annotations

from typing import Any

import pytest

from grpo_infra.k8s import objects

from .conftest import K8S_STACKS, by_kind, env_of

# Where a connection comes from: (namespace, that namespace's labels, pod labels, source IP).
Source = tuple[str | None, dict[str, str], dict[str, str], str]


def _selects(selector: dict[str, Any], labels: dict[str, str]) -> bool:
    """matchLabels and the In/NotIn/Exists/DoesNotExist expressions of a LabelSelector."""
    if any(labels.get(k) != v for k, v in selector.get("matchLabels", {}).items()):
        return False
    for e in selector.get("matchExpressions", []):
        present, value = e["key"] in labels, labels.get(e["key"])
        ok = {
            "In": present and value in e.get("values", []),
            "NotIn": not present or value not in e.get("values", []),
            "Exists": present,
            "DoesNotExist": not present,
        }[e["operator"]]
        if not ok:
            return False
    return True


def _in_cidr(ip: str, cidr: str) -> bool:
    import ipaddress

    return ipaddress.ip_address(ip) in ipaddress.ip_network(cidr, strict=False)


def admits(policy: dict[str, Any], source: Source) -> bool:
    """Would this ingress policy let `source` connect to a pod it selects?"""
    spec = policy["spec"]
    types = spec.get("policyTypes", ["Ingress"])
    if "Ingress" not in types:
        return True
    ns, ns_labels, pod_labels, ip = source
    own = policy["metadata"]["namespace"]
    for rule in spec.get("ingress", []):
        peers = rule.get("from")
        if not peers:  # a rule with no `from` admits every source
            return True
        for peer in peers:
            if "ipBlock" in peer:
                block = peer["ipBlock"]
                if _in_cidr(ip, block["cidr"]) and not any(_in_cidr(ip, c) for c in block.get("except", [])):
                    return True
                continue
            if ns is None:  # not a pod: only an ipBlock can admit it
                continue
            ns_ok = _selects(peer["namespaceSelector"], ns_labels) if "namespaceSelector" in peer else ns == own
            pod_ok = _selects(peer.get("podSelector", {}), pod_labels)
            if ns_ok and pod_ok:
                return True
    return False


def _namespace(name: str) -> dict[str, str]:
    # The API server labels every namespace with its own name.
    return {"kubernetes.io/metadata.name": name}


def _policy(stack: str) -> dict[str, Any]:
    policies = by_kind(objects(env_of(stack)), "NetworkPolicy")
    assert len(policies) == 1
    return policies[0]


@pytest.mark.parametrize("stack", K8S_STACKS)
def test_only_the_tenants_namespace_and_kuberay_reach_the_ray_pods(stack: str) -> None:
    policy, tenant = _policy(stack), env_of(stack).job.tenant
    assert admits(policy, (tenant, _namespace(tenant), {"app": "anything"}, "10.0.0.5"))
    assert admits(policy, ("kuberay-system", _namespace("kuberay-system"), {"app": "kuberay"}, "10.0.1.5"))
    assert not admits(policy, ("other-team", _namespace("other-team"), {}, "10.0.2.5"))
    assert not admits(policy, ("default", _namespace("default"), {"grpo-infra/job": "x"}, "10.0.2.6"))
    assert not admits(policy, ("kube-system", _namespace("kube-system"), {"k8s-app": "kube-dns"}, "10.0.2.7"))
    for outside in ("0.0.0.0", "203.0.113.7", "10.0.3.9", "192.168.1.1"):
        assert not admits(policy, (None, {}, {}, outside)), f"{outside} from outside the cluster is admitted"


@pytest.mark.parametrize("stack", K8S_STACKS)
def test_the_policy_declares_ingress_and_covers_every_ray_pod(stack: str) -> None:
    """Declared, not left to the API server's default: a reviewer sees which directions are fenced."""
    policy = _policy(stack)
    assert policy["spec"]["policyTypes"] == ["Ingress"]
    assert policy["metadata"]["namespace"] == env_of(stack).job.tenant
    job = by_kind(objects(env_of(stack)), "RayJob")[0]
    cluster = job["spec"]["rayClusterSpec"]
    templates = {"head": cluster["headGroupSpec"]["template"]}
    templates |= {g["groupName"]: g["template"] for g in cluster["workerGroupSpecs"]}
    for role, template in templates.items():
        assert _selects(policy["spec"]["podSelector"], template["metadata"]["labels"]), f"{role} is not fenced"


def test_the_evaluator_tells_an_open_policy_from_a_closed_one() -> None:
    """The judge above is itself checked: the policies a careless edit produces are caught by it."""
    base = _policy("onprem-k8s")
    outside = (None, {}, {}, "203.0.113.7")
    stranger = ("other-team", _namespace("other-team"), {}, "10.0.2.5")
    open_ip = {**base, "spec": {**base["spec"], "ingress": [{"from": [{"ipBlock": {"cidr": "0.0.0.0/0"}}]}]}}
    open_ns = {**base, "spec": {**base["spec"], "ingress": [{"from": [{"namespaceSelector": {}}]}]}}
    no_from = {**base, "spec": {**base["spec"], "ingress": [{}]}}
    assert admits(open_ip, outside) and admits(open_ns, stranger) and admits(no_from, stranger)
    assert not admits(base, outside) and not admits(base, stranger)
