"""Kubernetes -> Calico v3 conversions performed by Calico's KDD backend (pure code).

These mirror libcalico-go v3.32.1's ``k8s/conversion`` and the KDD resource clients that
use it: each function takes a Kubernetes object as decoded from the API server's JSON and
returns the Calico v3 object Calico would build from it, as a plain dict holding the
fields Go would marshal (keys in Go declaration order, maps sorted; see ``k8s_meta``).
The v3 -> v1 update processors, key paths and byte encoding live elsewhere in ``model``.

Failures that make Calico refuse an object raise :class:`ConversionError`.
"""

from __future__ import annotations

__sans_io__ = True

from .k8s_meta import (
    CALICO_API_VERSION,
    LABEL_NAMESPACE,
    LABEL_ORCHESTRATOR,
    LABEL_SERVICE_ACCOUNT,
    ConversionError,
    convert_uid,
)
from .k8s_node import NODE_KIND, node_to_calico_node
from .k8s_passthrough import endpoint_slice_passthrough, service_passthrough
from .k8s_pod import (
    DEFAULT_INTERFACE_PREFIX,
    WORKLOAD_ENDPOINT_KIND,
    interface_prefix_from_env,
    pod_has_workload_endpoint,
    pod_is_finished,
    pod_to_workload_endpoint,
    veth_name_for_workload,
    workload_endpoint_name,
)
from .k8s_policy import (
    KUBERNETES_NETWORK_POLICY_KIND,
    SELECTOR_NAMESPACE,
    SELECTOR_POD,
    k8s_network_policy_to_calico,
    k8s_selector_to_calico,
)
from .k8s_profile import (
    DEFAULT_ALLOW_PROFILE,
    DEFAULT_ALLOW_PROFILE_NAME,
    DEFAULT_ALLOW_PROFILE_REVISION,
    PROFILE_KIND,
    default_allow_profile,
    namespace_profile_name,
    namespace_to_profile,
    profile_revision,
    service_account_profile_name,
    service_account_to_profile,
)

KUBERNETES_SERVICE_KIND = "KubernetesService"
KUBERNETES_ENDPOINT_SLICE_KIND = "KubernetesEndpointSlice"

__all__ = [
    "CALICO_API_VERSION",
    "DEFAULT_ALLOW_PROFILE",
    "DEFAULT_ALLOW_PROFILE_NAME",
    "DEFAULT_ALLOW_PROFILE_REVISION",
    "DEFAULT_INTERFACE_PREFIX",
    "KUBERNETES_ENDPOINT_SLICE_KIND",
    "KUBERNETES_NETWORK_POLICY_KIND",
    "KUBERNETES_SERVICE_KIND",
    "LABEL_NAMESPACE",
    "LABEL_ORCHESTRATOR",
    "LABEL_SERVICE_ACCOUNT",
    "NODE_KIND",
    "PROFILE_KIND",
    "SELECTOR_NAMESPACE",
    "SELECTOR_POD",
    "WORKLOAD_ENDPOINT_KIND",
    "ConversionError",
    "convert_uid",
    "default_allow_profile",
    "endpoint_slice_passthrough",
    "interface_prefix_from_env",
    "k8s_network_policy_to_calico",
    "k8s_selector_to_calico",
    "namespace_profile_name",
    "namespace_to_profile",
    "node_to_calico_node",
    "pod_has_workload_endpoint",
    "pod_is_finished",
    "pod_to_workload_endpoint",
    "profile_revision",
    "service_account_profile_name",
    "service_account_to_profile",
    "service_passthrough",
    "veth_name_for_workload",
    "workload_endpoint_name",
]
