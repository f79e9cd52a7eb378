"""Pod -> Calico v3 WorkloadEndpoint, as Calico's KDD backend derives it.

Mirrors libcalico-go v3.32.1 ``k8s/conversion/workload_endpoint_default.go`` together with
the pod filter of ``k8s/resources/workloadendpoint.go``: host-networked and unscheduled
pods have no endpoint at all; every other pod gets one endpoint ``eth0`` whose IPs come
from the pod status (or Calico's / AWS's annotations), emptied once the pod has finished.
Calico still emits that IP-less endpoint; its v1 update processor is what turns "no IPs"
into a deletion, so the v3 object is returned here as Calico builds it.
"""

from __future__ import annotations

__sans_io__ = True

import hashlib
from collections.abc import Mapping
from typing import Any

from .golang import IPNet, format_ip, go_mask_ones, parse_cidr, parse_cidr_or_ip
from .k8s_meta import (
    CALICO_API_VERSION,
    LABEL_NAMESPACE,
    LABEL_ORCHESTRATOR,
    LABEL_SERVICE_ACCOUNT,
    ORCHESTRATOR_K8S,
    ConversionError,
    go_time,
    go_unmarshal_string_list,
    mapping,
    sorted_map,
    str_or_empty,
)
from .k8s_qos import qos_controls
from .shape import as_int, as_list, as_str

WORKLOAD_ENDPOINT_KIND = "WorkloadEndpoint"
DEFAULT_INTERFACE_PREFIX = "cali"

ANNOTATION_POD_IP = "cni.projectcalico.org/podIP"
ANNOTATION_POD_IPS = "cni.projectcalico.org/podIPs"
ANNOTATION_AWS_POD_IPS = "vpc.amazonaws.com/pod-ips"
ANNOTATION_CONTAINER_ID = "cni.projectcalico.org/containerID"
ANNOTATION_FLOATING_IPS = "cni.projectcalico.org/floatingIPs"
ANNOTATION_ALLOWED_SOURCE_PREFIXES = "cni.projectcalico.org/allowedSourcePrefixes"
ANNOTATION_NETWORK_STATUS = "k8s.v1.cni.cncf.io/network-status"

_FINISHED_PHASES = frozenset({"Failed", "Succeeded", "Completed"})
# Calico keeps the service-account label only while it is a valid label value length.
_MAX_SA_LABEL_BYTES = 63


def interface_prefix_from_env(value: str | None) -> str:
    """The veth name prefix Calico picks from ``FELIX_INTERFACEPREFIX``.

    Unset or empty gives ``cali``; otherwise the first comma-separated entry (which may
    itself be empty, exactly as in Calico).  Pass the result to the functions below.
    """
    if not value:
        return DEFAULT_INTERFACE_PREFIX
    return value.split(",")[0]


def veth_name_for_workload(namespace: str, pod_name: str,
                           prefix: str = DEFAULT_INTERFACE_PREFIX) -> str:
    """Host-side interface name of a pod: prefix + first 11 hex digits of
    SHA-1("<namespace>.<pod>") (Calico's ``VethNameForWorkload``; the CNI plugin names
    the veth the same way, so Felix can find it)."""
    digest = hashlib.sha1(f"{namespace}.{pod_name}".encode()).hexdigest()
    return prefix + digest[:11]


def workload_endpoint_name(node: str, pod_name: str, endpoint: str = "eth0") -> str:
    """The v3 WorkloadEndpoint name ``<node>-k8s-<pod>-<endpoint>``.

    Each segment has its dashes doubled so the name can be split again; a segment that is
    empty or starts or ends with a dash is refused (``ConversionError``), as Calico does.
    """
    parts = []
    for field, value in (("node", node), ("orchestrator", ORCHESTRATOR_K8S),
                         ("pod", pod_name), ("endpoint", endpoint)):
        if not value:
            raise ConversionError(f"workload endpoint {field} should be assigned")
        if value[0] == "-" or value[-1] == "-":
            raise ConversionError(f"workload endpoint {field} {value!r} must not begin or "
                                  "end with a '-'")
        parts.append(value.replace("-", "--"))
    return "-".join(parts)


def pod_has_workload_endpoint(pod: Mapping[str, Any]) -> bool:
    """Whether Calico shows the pod as an endpoint at all: scheduled, not host-networked."""
    spec = mapping(pod.get("spec"))
    return not spec.get("hostNetwork") and bool(spec.get("nodeName"))


def pod_is_finished(pod: Mapping[str, Any]) -> bool:
    """Calico's ``IsFinished``: the pod no longer owns its IPs.

    True for phase Failed/Succeeded/Completed, or for a pod being deleted whose Calico
    (or AWS) IP annotation the CNI plugin has explicitly set to the empty string.
    """
    meta = mapping(pod.get("metadata"))
    annotations = mapping(meta.get("annotations"))
    if meta.get("deletionTimestamp") is not None and (
        annotations.get(ANNOTATION_POD_IP) == ""
        or annotations.get(ANNOTATION_AWS_POD_IPS) == ""
    ):
        return True
    return as_str(mapping(pod.get("status")).get("phase"), "status.phase") in _FINISHED_PHASES


def pod_to_workload_endpoint(pod: Mapping[str, Any], *,
                             interface_prefix: str = DEFAULT_INTERFACE_PREFIX
                             ) -> dict[str, Any] | None:
    """The v3 WorkloadEndpoint Calico's KDD backend derives from ``pod``.

    Returns None for a pod Calico never lists (host-networked or not scheduled).
    The ResourceKey is (kind ``WorkloadEndpoint``, pod namespace, the returned
    ``metadata.name``); the revision is the pod's ``resourceVersion``.

    Raises ``ConversionError`` where Calico's conversion fails: a malformed pod IP,
    floating-IP or allowed-source-prefix annotation, or an unusable pod/node name.
    Bad QoS annotations do not fail the conversion (Calico logs them and uses what it
    could parse, pinned to the allowed ranges).
    """
    if not pod_has_workload_endpoint(pod):
        return None
    meta = mapping(pod.get("metadata"))
    spec = mapping(pod.get("spec"))
    annotations = mapping(meta.get("annotations"))
    namespace = str_or_empty(meta.get("namespace"))
    pod_name = str_or_empty(meta.get("name"))
    node = str_or_empty(spec.get("nodeName"))
    sa_name = str_or_empty(spec.get("serviceAccountName"))

    profiles = ["kns." + namespace]
    if sa_name:
        profiles.append(f"ksa.{namespace or 'default'}.{sa_name}")

    wep_name = workload_endpoint_name(node, pod_name)
    pod_nets = _pod_ip_networks(pod)
    if pod_is_finished(pod):
        # The IPs have gone back to the pool; the endpoint must not keep claiming them.
        pod_nets = []

    labels = dict(mapping(meta.get("labels")))
    labels[LABEL_NAMESPACE] = namespace
    labels[LABEL_ORCHESTRATOR] = ORCHESTRATOR_K8S
    if sa_name and len(sa_name.encode()) < _MAX_SA_LABEL_BYTES:
        labels[LABEL_SERVICE_ACCOUNT] = sa_name

    ip_nats = _floating_ips(annotations, pod_nets)
    source_prefixes = _allowed_source_prefixes(annotations)
    ports = _endpoint_ports(spec.get("containers")) + _endpoint_ports(spec.get("initContainers"))
    qos = qos_controls(annotations)

    metadata: dict[str, Any] = {"name": wep_name}
    if meta.get("generateName"):
        metadata["generateName"] = meta["generateName"]
    metadata["namespace"] = namespace
    if meta.get("uid"):
        metadata["uid"] = meta["uid"]
    metadata["creationTimestamp"] = go_time(meta.get("creationTimestamp"))
    metadata["labels"] = sorted_map(labels)
    if ANNOTATION_NETWORK_STATUS in annotations:
        metadata["annotations"] = {
            ANNOTATION_NETWORK_STATUS: str_or_empty(annotations[ANNOTATION_NETWORK_STATUS])}

    wep_spec: dict[str, Any] = {"orchestrator": ORCHESTRATOR_K8S, "node": node}
    container_id = str_or_empty(annotations.get(ANNOTATION_CONTAINER_ID))
    if container_id:
        wep_spec["containerID"] = container_id
    wep_spec["pod"] = pod_name
    wep_spec["endpoint"] = "eth0"
    if sa_name:
        wep_spec["serviceAccountName"] = sa_name
    if pod_nets:
        wep_spec["ipNetworks"] = [str(n) for _, n in pod_nets]
    if ip_nats:
        wep_spec["ipNATs"] = ip_nats
    wep_spec["profiles"] = profiles
    interface_name = veth_name_for_workload(namespace, pod_name, interface_prefix)
    if interface_name:
        wep_spec["interfaceName"] = interface_name
    if ports:
        wep_spec["ports"] = ports
    if source_prefixes:
        wep_spec["allowSpoofedSourcePrefixes"] = source_prefixes
    if qos is not None:
        wep_spec["qosControls"] = qos

    return {
        "kind": WORKLOAD_ENDPOINT_KIND,
        "apiVersion": CALICO_API_VERSION,
        "metadata": metadata,
        "spec": wep_spec,
    }


def _pod_ip_networks(pod: Mapping[str, Any]) -> list[tuple[str, IPNet]]:
    """Calico's ``getPodIPs``: the first non-empty source wins, every entry must parse.
    Each network comes with its text (Go's mask width depends on how it was written)."""
    status = mapping(pod.get("status"))
    annotations = mapping(mapping(pod.get("metadata")).get("annotations"))
    pod_ips = as_list(status.get("podIPs"), "status.podIPs")
    if pod_ips:
        texts = [str_or_empty(mapping(entry).get("ip")) for entry in pod_ips]
    elif status.get("podIP"):
        texts = [str(status["podIP"])]
    elif annotations.get(ANNOTATION_POD_IPS):
        texts = str(annotations[ANNOTATION_POD_IPS]).split(",")
    elif annotations.get(ANNOTATION_POD_IP):
        texts = [str(annotations[ANNOTATION_POD_IP])]
    elif annotations.get(ANNOTATION_AWS_POD_IPS):
        texts = str(annotations[ANNOTATION_AWS_POD_IPS]).split(",")
    else:
        return []
    nets = []
    for text in texts:
        # As in Go, an empty entry is a nil IP (net.IP.UnmarshalText accepts "").
        net = parse_cidr_or_ip(text, allow_empty=True)
        if net is None:
            raise ConversionError(f"failed to parse pod IP {text!r}: invalid CIDR address: {text}")
        nets.append((text, net))
    return nets


def _floating_ips(annotations: Mapping[str, Any],
                  pod_nets: list[tuple[str, IPNet]]) -> list[dict[str, str]]:
    """1:1 NATs from ``cni.projectcalico.org/floatingIPs``, only while the pod has IPs."""
    if ANNOTATION_FLOATING_IPS not in annotations or not pod_nets:
        return []
    text = str_or_empty(annotations[ANNOTATION_FLOATING_IPS])
    try:
        external_ips = go_unmarshal_string_list(text) or []
    except ValueError as exc:
        raise ConversionError(f"failed to parse {text!r} as JSON: {exc}") from exc
    internal_v4: IPNet | None = None
    internal_v6: IPNet | None = None
    for text, net in pod_nets:
        if net.version == 4:
            if go_mask_ones(text, net) != 32:
                raise ConversionError(f"PodIP {net} is not a valid IPv4: mask size is not 32")
            internal_v4 = net
        else:
            if go_mask_ones(text, net) != 128:
                raise ConversionError(f"PodIP {net} is not a valid IPv6: mask size is not 128")
            internal_v6 = net
    nats = []
    for external in external_ips:
        internal = internal_v6 if ":" in external else internal_v4
        if internal is not None:
            # A nil pod IP prints as Go's net.IP.String does.
            internal_ip = format_ip(internal.ip) if internal.ip else "<nil>"
            nats.append({"internalIP": internal_ip, "externalIP": external})
    return nats


def _allowed_source_prefixes(annotations: Mapping[str, Any]) -> list[str]:
    """Masked CIDRs from ``cni.projectcalico.org/allowedSourcePrefixes``; any bad entry
    fails the conversion."""
    text = str_or_empty(annotations.get(ANNOTATION_ALLOWED_SOURCE_PREFIXES))
    if not text:
        return []
    try:
        prefixes = go_unmarshal_string_list(text) or []
    except ValueError as exc:
        raise ConversionError(f"failed to parse {text!r} as JSON: {exc}") from exc
    out = []
    for prefix in prefixes:
        net = parse_cidr(prefix)
        if net is None:
            raise ConversionError(
                f"failed to parse {prefix!r} as a CIDR: invalid CIDR address: {prefix}")
        out.append(str(net))
    return out


_PORT_PROTOCOLS = {"UDP": "UDP", "SCTP": "SCTP", "TCP": "TCP", "": "TCP"}


def _endpoint_ports(containers: Any) -> list[dict[str, Any]]:
    """Named or host-mapped container ports (``appendEndpointPorts``).

    Kept when the container port is set and the port has a host port or a name; the
    protocol must be TCP (the default), UDP or SCTP.  Calico's v3 protocol text is
    the canonical upper-case name.
    """
    ports = []
    for container in as_list(containers, "spec.containers"):
        for port in as_list(mapping(container).get("ports"), "spec.containers[].ports"):
            port = mapping(port)
            container_port = as_int(port.get("containerPort"), "containerPort")
            host_port = as_int(port.get("hostPort"), "hostPort")
            name = str_or_empty(port.get("name"))
            if container_port == 0 or (host_port == 0 and not name):
                continue
            protocol = _PORT_PROTOCOLS.get(str_or_empty(port.get("protocol")))
            if protocol is None:
                continue
            ports.append({
                "name": name,
                "protocol": protocol,
                "port": container_port & 0xFFFF,  # Go stores these as uint16
                "hostPort": host_port & 0xFFFF,
                "hostIP": str_or_empty(port.get("hostIP")),
            })
    return ports
