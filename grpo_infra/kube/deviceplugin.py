"""A device plugin that advertises a node's fake GPUs (and fabric devices) to its kubelet the way
NVIDIA's plugin advertises real ones: over the kubelet's device-plugin API, so the node's capacity,
allocatable, the scheduler's fit and Kueue's quotas come from the kubelet as on a cloud node.

The API is k8s.io/kubelet v0.36.3 `pkg/apis/deviceplugin/v1beta1/api.proto` (service Registration
on `/var/lib/kubelet/device-plugins/kubelet.sock`; service DevicePlugin on a socket of the plugin's
own in that directory; `constants.go` there). Its messages are declared below from that file's
field numbers, so no protoc step is needed. A device is only an ID: Allocate answers with the
environment NVIDIA's plugin sets (NVIDIA_VISIBLE_DEVICES), and no device node, since there is none; a
verbs fabric's resource answers with the node's uverbs character nodes (grpo_infra/kube/hcas.py).

Run as `python -m grpo_infra.kube.deviceplugin nvidia.com/gpu=8 [vendor.com/fabric=4 ...]` inside
the node's mount namespace. The kubelet removes every socket in the directory when it restarts;
the plugin then serves and registers again.
"""

from __future__ import annotations

import argparse
import os
import sys
import threading
import time
from collections.abc import Iterator
from concurrent import futures
from pathlib import Path
from typing import Any

import grpc
from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

PLUGIN_DIR = Path("/var/lib/kubelet/device-plugins")
KUBELET_SOCKET = PLUGIN_DIR / "kubelet.sock"
API_VERSION = "v1beta1"
_PACKAGE = "v1beta1"

_F = descriptor_pb2.FieldDescriptorProto
# message -> [(field, number, type, label, type name)] after api.proto (proto3).
_MESSAGES: dict[str, list[tuple[str, int, int, int, str]]] = {
    "Empty": [],
    "DevicePluginOptions": [
        ("pre_start_required", 1, _F.TYPE_BOOL, _F.LABEL_OPTIONAL, ""),
        ("get_preferred_allocation_available", 2, _F.TYPE_BOOL, _F.LABEL_OPTIONAL, ""),
    ],
    "RegisterRequest": [
        ("version", 1, _F.TYPE_STRING, _F.LABEL_OPTIONAL, ""),
        ("endpoint", 2, _F.TYPE_STRING, _F.LABEL_OPTIONAL, ""),
        ("resource_name", 3, _F.TYPE_STRING, _F.LABEL_OPTIONAL, ""),
        ("options", 4, _F.TYPE_MESSAGE, _F.LABEL_OPTIONAL, ".v1beta1.DevicePluginOptions"),
    ],
    "Device": [
        ("ID", 1, _F.TYPE_STRING, _F.LABEL_OPTIONAL, ""),
        ("health", 2, _F.TYPE_STRING, _F.LABEL_OPTIONAL, ""),
    ],
    "ListAndWatchResponse": [("devices", 1, _F.TYPE_MESSAGE, _F.LABEL_REPEATED, ".v1beta1.Device")],
    "ContainerAllocateRequest": [("devices_ids", 1, _F.TYPE_STRING, _F.LABEL_REPEATED, "")],
    "AllocateRequest": [
        ("container_requests", 1, _F.TYPE_MESSAGE, _F.LABEL_REPEATED, ".v1beta1.ContainerAllocateRequest")
    ],
    "DeviceSpec": [
        ("container_path", 1, _F.TYPE_STRING, _F.LABEL_OPTIONAL, ""),
        ("host_path", 2, _F.TYPE_STRING, _F.LABEL_OPTIONAL, ""),
        ("permissions", 3, _F.TYPE_STRING, _F.LABEL_OPTIONAL, ""),
    ],
    "ContainerAllocateResponse": [
        ("envs", 1, _F.TYPE_MESSAGE, _F.LABEL_REPEATED, ".v1beta1.ContainerAllocateResponse.EnvsEntry"),
        ("devices", 3, _F.TYPE_MESSAGE, _F.LABEL_REPEATED, ".v1beta1.DeviceSpec"),
    ],
    "AllocateResponse": [
        ("container_responses", 1, _F.TYPE_MESSAGE, _F.LABEL_REPEATED, ".v1beta1.ContainerAllocateResponse")
    ],
    "PreStartContainerRequest": [("devices_ids", 1, _F.TYPE_STRING, _F.LABEL_REPEATED, "")],
    "PreStartContainerResponse": [],
    "ContainerPreferredAllocationRequest": [
        ("available_deviceIDs", 1, _F.TYPE_STRING, _F.LABEL_REPEATED, ""),
        ("must_include_deviceIDs", 2, _F.TYPE_STRING, _F.LABEL_REPEATED, ""),
        ("allocation_size", 3, _F.TYPE_INT32, _F.LABEL_OPTIONAL, ""),
    ],
    "PreferredAllocationRequest": [
        (
            "container_requests",
            1,
            _F.TYPE_MESSAGE,
            _F.LABEL_REPEATED,
            ".v1beta1.ContainerPreferredAllocationRequest",
        )
    ],
    "ContainerPreferredAllocationResponse": [("deviceIDs", 1, _F.TYPE_STRING, _F.LABEL_REPEATED, "")],
    "PreferredAllocationResponse": [
        (
            "container_responses",
            1,
            _F.TYPE_MESSAGE,
            _F.LABEL_REPEATED,
            ".v1beta1.ContainerPreferredAllocationResponse",
        )
    ],
}


def _messages() -> dict[str, Any]:
    """The message classes of api.proto, built from a descriptor declared here."""
    fd = descriptor_pb2.FileDescriptorProto(name="deviceplugin_v1beta1.proto", package=_PACKAGE, syntax="proto3")
    for name, fields in _MESSAGES.items():
        msg = fd.message_type.add(name=name)
        for field, number, ftype, label, type_name in fields:
            added = msg.field.add(name=field, number=number, type=ftype, label=label)
            if type_name:
                added.type_name = type_name
        if name == "ContainerAllocateResponse":
            entry = msg.nested_type.add(name="EnvsEntry")
            entry.options.map_entry = True
            entry.field.add(name="key", number=1, type=_F.TYPE_STRING, label=_F.LABEL_OPTIONAL)
            entry.field.add(name="value", number=2, type=_F.TYPE_STRING, label=_F.LABEL_OPTIONAL)
    pool = descriptor_pool.DescriptorPool()
    pool.Add(fd)
    return {
        name: message_factory.GetMessageClass(pool.FindMessageTypeByName(f"{_PACKAGE}.{name}")) for name in _MESSAGES
    }


M = _messages()


def _unary(handler: Any, request: str) -> grpc.RpcMethodHandler:
    return grpc.unary_unary_rpc_method_handler(
        handler, request_deserializer=M[request].FromString, response_serializer=lambda m: m.SerializeToString()
    )


def device_ids(resource: str, count: int) -> list[str]:
    """Stable IDs per resource: `<last name part>-<i>` (e.g. gpu-0 … gpu-7)."""
    short = resource.rsplit("/", 1)[-1]
    return [f"{short}-{i}" for i in range(count)]


class Plugin:
    """One resource's DevicePlugin service on its own socket."""

    def __init__(
        self, resource: str, count: int, plugin_dir: Path = PLUGIN_DIR, device_nodes: tuple[Path, str] | None = None
    ) -> None:
        self.resource = resource
        self.ids = device_ids(resource, count)
        # (host directory, container directory): every node file of the host directory is given to a container
        # allocated any of this resource, as the RDMA shared device plugin gives every HCA's devices.
        self.device_nodes = device_nodes
        self.socket = plugin_dir / f"grpo-{resource.replace('/', '_')}.sock"
        self.kubelet_socket = plugin_dir / KUBELET_SOCKET.name
        self.server: grpc.Server | None = None
        self.stopped = threading.Event()

    # -- the DevicePlugin service
    def options(self, request: Any, context: Any) -> Any:
        return M["DevicePluginOptions"]()

    def list_and_watch(self, request: Any, context: Any) -> Iterator[Any]:
        devices = [M["Device"](ID=i, health="Healthy") for i in self.ids]
        yield M["ListAndWatchResponse"](devices=devices)
        # The devices never change; keep the stream open until the kubelet or we go away.
        while context.is_active() and not self.stopped.wait(5):
            pass

    def allocate(self, request: Any, context: Any) -> Any:
        responses = []
        for container in request.container_requests:
            ids = ",".join(container.devices_ids)
            envs = {"NVIDIA_VISIBLE_DEVICES": ids} if "gpu" in self.resource else {"GRPO_FAKE_DEVICES": ids}
            responses.append(M["ContainerAllocateResponse"](envs=envs, devices=self.device_specs()))
        return M["AllocateResponse"](container_responses=responses)

    def device_specs(self) -> list[Any]:
        if self.device_nodes is None:
            return []
        host, inside = self.device_nodes
        return [
            M["DeviceSpec"](container_path=f"{inside}/{node.name}", host_path=str(node), permissions="rw")
            for node in sorted(host.iterdir())
        ]

    def preferred(self, request: Any, context: Any) -> Any:
        return M["PreferredAllocationResponse"](
            container_responses=[
                M["ContainerPreferredAllocationResponse"](deviceIDs=list(c.available_deviceIDs)[: c.allocation_size])
                for c in request.container_requests
            ]
        )

    def pre_start(self, request: Any, context: Any) -> Any:
        return M["PreStartContainerResponse"]()

    def serve(self) -> None:
        """Serve on the plugin's socket and register it with the kubelet."""
        self.socket.unlink(missing_ok=True)
        server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
        handlers = {
            "GetDevicePluginOptions": _unary(self.options, "Empty"),
            "ListAndWatch": grpc.unary_stream_rpc_method_handler(
                self.list_and_watch,
                request_deserializer=M["Empty"].FromString,
                response_serializer=lambda m: m.SerializeToString(),
            ),
            "GetPreferredAllocation": _unary(self.preferred, "PreferredAllocationRequest"),
            "Allocate": _unary(self.allocate, "AllocateRequest"),
            "PreStartContainer": _unary(self.pre_start, "PreStartContainerRequest"),
        }
        server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(f"{_PACKAGE}.DevicePlugin", handlers),))
        server.add_insecure_port(f"unix://{self.socket}")
        server.start()
        self.server = server
        with grpc.insecure_channel(f"unix://{self.kubelet_socket}") as channel:
            register = channel.unary_unary(
                f"/{_PACKAGE}.Registration/Register",
                request_serializer=lambda m: m.SerializeToString(),
                response_deserializer=M["Empty"].FromString,
            )
            register(
                M["RegisterRequest"](
                    version=API_VERSION,
                    endpoint=self.socket.name,
                    resource_name=self.resource,
                    options=M["DevicePluginOptions"](),
                ),
                timeout=10,
                wait_for_ready=True,
            )
        print(f"registered {self.resource} ({len(self.ids)} devices) at {self.socket}", flush=True)

    def stop(self) -> None:
        if self.server is not None:
            self.server.stop(grace=0)
            self.server = None


def run(
    resources: dict[str, int], plugin_dir: Path = PLUGIN_DIR, device_nodes: dict[str, tuple[Path, str]] | None = None
) -> None:
    """Serve every resource and serve again whenever its socket disappears (a kubelet restart)."""
    nodes = device_nodes or {}
    plugins = [Plugin(r, n, plugin_dir, nodes.get(r)) for r, n in resources.items()]
    while True:
        for plugin in plugins:
            if plugin.server is None or not plugin.socket.exists():
                plugin.stop()
                try:
                    plugin.serve()
                except grpc.RpcError as exc:
                    print(f"register {plugin.resource}: {exc.code().name} {exc.details()}", flush=True)
                    plugin.stop()
        time.sleep(1)


def parse(specs: list[str]) -> dict[str, int]:
    out = {}
    for spec in specs:
        name, _, count = spec.partition("=")
        if not name or not count.isdigit():
            raise SystemExit(f"expected RESOURCE=COUNT, got {spec!r}")
        out[name] = int(count)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("resources", nargs="+", help="RESOURCE=COUNT, e.g. nvidia.com/gpu=8")
    parser.add_argument("--plugin-dir", type=Path, default=PLUGIN_DIR)
    parser.add_argument(
        "--device-dir",
        action="append",
        default=[],
        help="RESOURCE=HOST_DIR=CONTAINER_DIR: a container allocated RESOURCE gets every node file of HOST_DIR",
    )
    args = parser.parse_args(argv)
    os.makedirs(args.plugin_dir, exist_ok=True)
    device_nodes = {}
    for spec in args.device_dir:
        resource, host, inside = spec.split("=", 2)
        device_nodes[resource] = (Path(host), inside)
    run(parse(args.resources), args.plugin_dir, device_nodes)
    return 0


if __name__ == "__main__":
    sys.exit(main())
