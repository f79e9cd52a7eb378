"""Pod QoS annotations -> the WorkloadEndpoint's ``qosControls``.

Mirrors libcalico-go v3.32.1 ``handleQoSControlsAnnotations``
(``k8s/conversion/workload_endpoint_default.go``): bandwidth, burst, peak-rate, min-burst,
packet-rate and connection-limit annotations are read as Kubernetes quantities and pinned
to Calico's allowed ranges; limits whose companion is missing are dropped, bursts get
their defaults, and a valid DSCP annotation is carried as a number or class name.
Problems are never fatal (Calico logs them and keeps what it could use).
"""

from __future__ import annotations

__sans_io__ = True

from collections.abc import Mapping
from typing import Any

from .k8s_meta import str_or_empty
from .k8s_quantity import clamp_quantity

# (annotation, QoSControls field, minimum, maximum), in the order Calico applies them:
# the Calico bandwidth annotations override the Kubernetes ones.
_QOS_ANNOTATIONS: tuple[tuple[str, str, int, int], ...] = (
    ("kubernetes.io/ingress-bandwidth", "ingressBandwidth", 10**3, 10**15),
    ("kubernetes.io/egress-bandwidth", "egressBandwidth", 10**3, 10**15),
    ("qos.projectcalico.org/ingressBandwidth", "ingressBandwidth", 10**3, 10**15),
    ("qos.projectcalico.org/egressBandwidth", "egressBandwidth", 10**3, 10**15),
    ("qos.projectcalico.org/ingressBurst", "ingressBurst", 10**3, (2**32 - 1) * 8),
    ("qos.projectcalico.org/egressBurst", "egressBurst", 10**3, (2**32 - 1) * 8),
    ("qos.projectcalico.org/ingressPeakrate", "ingressPeakrate", 1010, 1010 * 10**12),
    ("qos.projectcalico.org/egressPeakrate", "egressPeakrate", 1010, 1010 * 10**12),
    ("qos.projectcalico.org/ingressMinburst", "ingressMinburst", 10**3, 10**8),
    ("qos.projectcalico.org/egressMinburst", "egressMinburst", 10**3, 10**8),
    ("qos.projectcalico.org/ingressPacketRate", "ingressPacketRate", 1, 10**4),
    ("qos.projectcalico.org/egressPacketRate", "egressPacketRate", 1, 10**4),
    ("qos.projectcalico.org/ingressPacketBurst", "ingressPacketBurst", 1, 10**4),
    ("qos.projectcalico.org/egressPacketBurst", "egressPacketBurst", 1, 10**4),
    ("qos.projectcalico.org/ingressMaxConnections", "ingressMaxConnections", 1, 2**32 - 1),
    ("qos.projectcalico.org/egressMaxConnections", "egressMaxConnections", 1, 2**32 - 1),
)
_QOS_FIELDS = ("ingressBandwidth", "ingressBurst", "ingressPeakrate", "ingressMinburst",
               "egressBandwidth", "egressBurst", "egressPeakrate", "egressMinburst",
               "ingressPacketRate", "ingressPacketBurst", "egressPacketRate",
               "egressPacketBurst", "ingressMaxConnections", "egressMaxConnections")
_DEFAULT_BURST = 4 * 2**30
_DEFAULT_PACKET_BURST = 5
_DSCP_NAMES = {"DF": 0, "EF": 46, "AF11": 10, "AF12": 12, "AF13": 14, "AF21": 18,
               "AF22": 20, "AF23": 22, "AF31": 26, "AF32": 28, "AF33": 30, "AF41": 34,
               "AF42": 36, "AF43": 38, "CS0": 0, "CS1": 8, "CS2": 16, "CS3": 24, "CS4": 32,
               "CS5": 40, "CS6": 48}
ANNOTATION_QOS_DSCP = "qos.projectcalico.org/dscp"


def qos_controls(annotations: Mapping[str, Any]) -> dict[str, Any] | None:
    """Calico's ``handleQoSControlsAnnotations``: limits that depend on a missing
    companion are dropped, bursts get their defaults, and nothing set gives None."""
    q = dict.fromkeys(_QOS_FIELDS, 0)
    for annotation, field, lo, hi in _QOS_ANNOTATIONS:
        if annotation in annotations:
            q[field] = clamp_quantity(str_or_empty(annotations[annotation]), lo, hi)[0]
    for direction in ("ingress", "egress"):
        bandwidth = q[direction + "Bandwidth"]
        if q[direction + "Burst"] and not bandwidth:
            q[direction + "Burst"] = 0
        peak = q[direction + "Peakrate"]
        if peak and (not bandwidth or bandwidth >= peak):
            q[direction + "Peakrate"] = 0
        if q[direction + "Minburst"] and not q[direction + "Peakrate"]:
            q[direction + "Minburst"] = 0
        if q[direction + "PacketBurst"] and not q[direction + "PacketRate"]:
            q[direction + "PacketBurst"] = 0
    for direction in ("ingress", "egress"):
        if q[direction + "Bandwidth"] and not q[direction + "Burst"]:
            q[direction + "Burst"] = _DEFAULT_BURST
        if q[direction + "PacketRate"] and not q[direction + "PacketBurst"]:
            q[direction + "PacketBurst"] = _DEFAULT_PACKET_BURST
    out: dict[str, Any] = {k: v for k, v in q.items() if v}
    if ANNOTATION_QOS_DSCP in annotations:
        dscp = _dscp(str_or_empty(annotations[ANNOTATION_QOS_DSCP]))
        if dscp is not None:
            out["dscp"] = dscp
    return out or None


def _dscp(text: str) -> int | str | None:
    """A valid DSCP as it marshals (number, or canonical class name); None if invalid."""
    for name in _DSCP_NAMES:
        if name.casefold() == text.casefold():  # Go's strings.EqualFold
            return name
    number = _go_uint8(text)
    if number is not None:
        return number if number <= 63 else None
    return text if text.strip().upper() in _DSCP_NAMES else None


def _go_uint8(text: str) -> int | None:
    """``strconv.ParseUint(text, 10, 8)``."""
    if not text or not text.isascii() or not text.isdigit():
        return None
    value = int(text)
    return value if value <= 255 else None
