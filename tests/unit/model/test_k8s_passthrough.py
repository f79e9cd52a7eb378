"""KubernetesService / KubernetesEndpointSlice values: the typed Go round trip."""

from __future__ import annotations

import copy
from typing import Any

from trio_typha.model.k8s import endpoint_slice_passthrough, service_passthrough

FIELDS_V1 = {"f:metadata": {"f:labels": {".": {}, "f:app": {}}}, "f:spec": {"f:ports": {}}}

SERVICE: dict[str, Any] = {
    "kind": "Service",
    "apiVersion": "v1",
    "metadata": {
        "name": "web", "namespace": "prod", "uid": "5d2c6a7e-0000-4000-8000-000000000001",
        "resourceVersion": "4242", "creationTimestamp": "2024-05-01T10:00:00Z",
        "labels": {"z": "1", "app": "web"},
        "managedFields": [{"manager": "kubectl", "operation": "Update", "apiVersion": "v1",
                           "time": "2024-05-01T10:00:00Z", "fieldsType": "FieldsV1",
                           "fieldsV1": FIELDS_V1}],
    },
    "spec": {
        "ports": [{"name": "http", "protocol": "TCP", "port": 80, "targetPort": 8080},
                  {"name": "grpc", "protocol": "TCP", "port": 9000, "targetPort": "grpc",
                   "nodePort": 0}],
        "selector": {"app": "web"},
        "clusterIP": "10.96.0.10",
        "clusterIPs": ["10.96.0.10"],
        "type": "ClusterIP",
        "sessionAffinity": "None",
        "ipFamilies": ["IPv4"],
        "ipFamilyPolicy": "SingleStack",
        "internalTrafficPolicy": "Cluster",
        "someFutureField": {"x": 1},
    },
    "status": {"loadBalancer": {}},
}


def test_service_passthrough() -> None:
    value = service_passthrough(SERVICE)
    assert value == {
        "metadata": {
            "name": "web", "namespace": "prod", "uid": "5d2c6a7e-0000-4000-8000-000000000001",
            "resourceVersion": "4242", "creationTimestamp": "2024-05-01T10:00:00Z",
            "labels": {"app": "web", "z": "1"},
            "managedFields": [{"manager": "kubectl", "operation": "Update",
                               "apiVersion": "v1", "time": "2024-05-01T10:00:00Z",
                               "fieldsType": "FieldsV1", "fieldsV1": FIELDS_V1}],
        },
        "spec": {
            "ports": [{"name": "http", "protocol": "TCP", "port": 80, "targetPort": 8080},
                      {"name": "grpc", "protocol": "TCP", "port": 9000, "targetPort": "grpc"}],
            "selector": {"app": "web"},
            "clusterIP": "10.96.0.10",
            "clusterIPs": ["10.96.0.10"],
            "type": "ClusterIP",
            "sessionAffinity": "None",
            "ipFamilies": ["IPv4"],
            "ipFamilyPolicy": "SingleStack",
            "internalTrafficPolicy": "Cluster",
        },
        "status": {"loadBalancer": {}},
    }
    # No TypeMeta on typed client-go objects; Go map fields come out sorted.
    assert "kind" not in value and "apiVersion" not in value
    assert list(value["metadata"]["labels"]) == ["app", "z"]


def test_service_minimal_fills_fields_go_always_marshals() -> None:
    value = service_passthrough({"metadata": {"name": "s"},
                                 "spec": {"ports": [{"protocol": "UDP"}]}})
    assert value == {
        "metadata": {"name": "s", "creationTimestamp": None},
        "spec": {"ports": [{"protocol": "UDP", "port": 0, "targetPort": 0}]},
        "status": {"loadBalancer": {}},
    }


def test_service_status_and_session_affinity() -> None:
    svc = copy.deepcopy(SERVICE)
    svc["spec"]["sessionAffinityConfig"] = {"clientIP": {"timeoutSeconds": 10800}}
    svc["spec"]["allocateLoadBalancerNodePorts"] = False
    svc["status"] = {
        "loadBalancer": {"ingress": [{"ip": "192.0.2.1", "ipMode": "VIP",
                                      "ports": [{"port": 80, "protocol": "TCP"}]}]},
        "conditions": [{"type": "Ready", "status": "True",
                        "lastTransitionTime": "2024-05-01T10:00:05.5Z", "reason": "",
                        "message": "ok"}],
    }
    value = service_passthrough(svc)
    assert value["spec"]["sessionAffinityConfig"] == {"clientIP": {"timeoutSeconds": 10800}}
    # A pointer field keeps its zero value.
    assert value["spec"]["allocateLoadBalancerNodePorts"] is False
    assert value["status"] == {
        "loadBalancer": {"ingress": [{"ip": "192.0.2.1", "ipMode": "VIP",
                                      "ports": [{"port": 80, "protocol": "TCP"}]}]},
        "conditions": [{"type": "Ready", "status": "True",
                        "lastTransitionTime": "2024-05-01T10:00:05Z", "reason": "",
                        "message": "ok"}],
    }


def test_endpoint_slice_passthrough() -> None:
    eps = {
        "kind": "EndpointSlice", "apiVersion": "discovery.k8s.io/v1",
        "metadata": {"name": "web-abc12", "namespace": "prod", "generateName": "web-",
                     "labels": {"kubernetes.io/service-name": "web"},
                     "ownerReferences": [{"apiVersion": "v1", "kind": "Service", "name": "web",
                                          "uid": "u", "controller": True,
                                          "blockOwnerDeletion": True}],
                     "creationTimestamp": "2024-05-01T10:00:00Z", "generation": 3},
        "addressType": "IPv4",
        "endpoints": [
            {"addresses": ["10.244.1.5"],
             "conditions": {"ready": True, "serving": True, "terminating": False},
             "nodeName": "node-1",
             "targetRef": {"kind": "Pod", "namespace": "prod", "name": "web-1", "uid": "p"},
             "zone": "z1", "hints": {"forZones": [{"name": "z1"}]}},
            {"addresses": ["10.244.2.6"]},
        ],
        "ports": [{"name": "http", "protocol": "TCP", "port": 8080}, {"name": ""}],
    }
    assert endpoint_slice_passthrough(eps) == {
        "metadata": {"name": "web-abc12", "generateName": "web-", "namespace": "prod",
                     "generation": 3, "creationTimestamp": "2024-05-01T10:00:00Z",
                     "labels": {"kubernetes.io/service-name": "web"},
                     "ownerReferences": [{"apiVersion": "v1", "kind": "Service", "name": "web",
                                          "uid": "u", "controller": True,
                                          "blockOwnerDeletion": True}]},
        "addressType": "IPv4",
        "endpoints": [
            {"addresses": ["10.244.1.5"],
             "conditions": {"ready": True, "serving": True, "terminating": False},
             "targetRef": {"kind": "Pod", "namespace": "prod", "name": "web-1", "uid": "p"},
             "nodeName": "node-1", "zone": "z1", "hints": {"forZones": [{"name": "z1"}]}},
            {"addresses": ["10.244.2.6"], "conditions": {}},
        ],
        "ports": [{"name": "http", "protocol": "TCP", "port": 8080}, {"name": ""}],
    }


def test_endpoint_slice_empty_lists_are_null() -> None:
    # Calico reads over protobuf, where an empty list decodes as nil -> null.
    assert endpoint_slice_passthrough({"metadata": {"name": "e"}, "addressType": "IPv6",
                                       "endpoints": [], "ports": []}) == {
        "metadata": {"name": "e", "creationTimestamp": None},
        "addressType": "IPv6", "endpoints": None, "ports": None}


def test_passthrough_does_not_share_or_modify_input() -> None:
    svc = copy.deepcopy(SERVICE)
    value = service_passthrough(svc)
    assert svc == SERVICE
    value["metadata"]["managedFields"][0]["fieldsV1"]["f:spec"]["changed"] = 1
    value["spec"]["clusterIPs"].append("x")
    assert svc == SERVICE
