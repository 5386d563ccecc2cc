"""Machines simulated on this one: the layer the Slurm sandbox and the local Kubernetes share.

A local node is a network namespace on a bridge of this machine (a veth pair each), with a
directory of its own under its cluster's root. Everything a node runs is found again from what the
kernel knows (the processes in its network namespace, the processes in its cgroups) or from a pid
file whose command line names the cluster's root, so a teardown after a crash finds as much as one
after a clean run, and leaves nothing: no process, namespace, link, cgroup or file outside the root
that the cluster created.
"""

from .net import (
    Link,
    Machine,
    add_bridge,
    attach,
    check_subnet_free,
    delete_links,
    namespace_pids,
    namespaces,
)
from .procs import kill_all, kill_namespace
from .teardown import remove_created, stop_pidfiles, teardown

__all__ = [
    "Link",
    "Machine",
    "add_bridge",
    "attach",
    "check_subnet_free",
    "delete_links",
    "kill_all",
    "kill_namespace",
    "namespace_pids",
    "namespaces",
    "remove_created",
    "stop_pidfiles",
    "teardown",
]
