"""Pod -> v3 WorkloadEndpoint (Calico's KDD conversion,
``libcalico-go/lib/backend/k8s/conversion/workload_endpoint_default.go``) and edge cases."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from trio_typha.model.k8s import (
    ConversionError,
    interface_prefix_from_env,
    pod_to_workload_endpoint,
    veth_name_for_workload,
    workload_endpoint_name,
)


def make_pod(*, name: str = "web-1", namespace: str = "prod", node: str | None = "node-1",
             labels: dict[str, str] | None = None, annotations: dict[str, str] | None = None,
             status: dict[str, Any] | None = None, containers: list[Any] | None = None,
             sa: str | None = None, **meta: Any) -> dict[str, Any]:
    metadata: dict[str, Any] = {"name": name, "namespace": namespace, **meta}
    if labels is not None:
        metadata["labels"] = labels
    if annotations is not None:
        metadata["annotations"] = annotations
    spec: dict[str, Any] = {"containers": containers or [{"name": "c"}]}
    if node is not None:
        spec["nodeName"] = node
    if sa is not None:
        spec["serviceAccountName"] = sa
    return {"metadata": metadata, "spec": spec, "status": status or {"phase": "Running"}}


def spec_of(pod: dict[str, Any]) -> dict[str, Any]:
    wep = pod_to_workload_endpoint(pod)
    assert wep is not None
    return wep["spec"]


G4_POD = make_pod(
    labels={"app": "web"}, resourceVersion="2002", sa="default",
    containers=[{"name": "app", "ports": [
        {"name": "http", "containerPort": 8080, "protocol": "TCP"},
        {"containerPort": 9090},
    ]}],
    status={"phase": "Running", "podIPs": [{"ip": "10.244.1.5"}, {"ip": "fd00::5"}],
            "podIP": "10.244.1.5"},
)


def test_pod_to_workload_endpoint() -> None:
    assert pod_to_workload_endpoint(G4_POD) == {
        "kind": "WorkloadEndpoint",
        "apiVersion": "projectcalico.org/v3",
        "metadata": {
            "name": "node--1-k8s-web--1-eth0",
            "namespace": "prod",
            "creationTimestamp": None,
            "labels": {
                "app": "web",
                "projectcalico.org/namespace": "prod",
                "projectcalico.org/orchestrator": "k8s",
                "projectcalico.org/serviceaccount": "default",
            },
        },
        "spec": {
            "orchestrator": "k8s",
            "node": "node-1",
            "pod": "web-1",
            "endpoint": "eth0",
            "serviceAccountName": "default",
            "ipNetworks": ["10.244.1.5/32", "fd00::5/128"],
            "profiles": ["kns.prod", "ksa.prod.default"],
            "interfaceName": "cali91bef8fbcc9",
            # The unnamed 9090 port has no host port, so Calico skips it.
            "ports": [{"name": "http", "protocol": "TCP", "port": 8080, "hostPort": 0,
                       "hostIP": ""}],
        },
    }


def test_dict_keys_follow_go_field_order() -> None:
    wep = pod_to_workload_endpoint(G4_POD)
    assert wep is not None
    assert list(wep) == ["kind", "apiVersion", "metadata", "spec"]
    assert list(wep["metadata"]) == ["name", "namespace", "creationTimestamp", "labels"]
    assert list(wep["spec"]) == ["orchestrator", "node", "pod", "endpoint",
                                 "serviceAccountName", "ipNetworks", "profiles",
                                 "interfaceName", "ports"]


def test_metadata_uid_timestamp_generate_name_are_copied() -> None:
    pod = make_pod(uid="9f1c3e7a-0000-4000-8000-000000000001",
                   creationTimestamp="2024-05-01T12:00:00.123456+02:00",
                   generateName="web-")
    wep = pod_to_workload_endpoint(pod)
    assert wep is not None
    assert wep["metadata"] == {
        "name": "node--1-k8s-web--1-eth0",
        "generateName": "web-",
        "namespace": "prod",
        # The pod UID is used as-is (only derived objects get ConvertUID).
        "uid": "9f1c3e7a-0000-4000-8000-000000000001",
        "creationTimestamp": "2024-05-01T10:00:00Z",
        "labels": {"projectcalico.org/namespace": "prod",
                   "projectcalico.org/orchestrator": "k8s"},
    }


def test_variant_single_pod_ip() -> None:
    pod = make_pod(status={"phase": "Running", "podIP": "10.244.1.5"})
    wep = pod_to_workload_endpoint(pod)
    assert wep is not None
    assert wep["spec"]["ipNetworks"] == ["10.244.1.5/32"]


@pytest.mark.parametrize("phase", ["Succeeded", "Failed", "Completed"])
def test_finished_pod_keeps_endpoint_without_ips(phase: str) -> None:
    pod = copy.deepcopy(G4_POD)
    pod["status"]["phase"] = phase
    wep = pod_to_workload_endpoint(pod)
    assert wep is not None
    assert "ipNetworks" not in wep["spec"]
    assert wep["spec"]["interfaceName"] == "cali91bef8fbcc9"


def test_host_network_pod_has_no_endpoint() -> None:
    pod = copy.deepcopy(G4_POD)
    pod["spec"]["hostNetwork"] = True
    assert pod_to_workload_endpoint(pod) is None


def test_unscheduled_pod_has_no_endpoint() -> None:
    assert pod_to_workload_endpoint(make_pod(node=None)) is None
    assert pod_to_workload_endpoint(make_pod(node="")) is None


def test_pod_without_ips_has_endpoint_without_ip_networks() -> None:
    wep = pod_to_workload_endpoint(make_pod(status={"phase": "Pending"}))
    assert wep is not None
    assert "ipNetworks" not in wep["spec"]
    assert wep["spec"]["profiles"] == ["kns.prod"]


def test_pod_labels_are_kept_verbatim_including_reserved_prefixes() -> None:
    # The v3 WEP keeps pcns./pcsa. labels; Calico's v1 processor is what drops them.
    pod = make_pod(labels={"pcns.x": "y", "pcsa.z": "w", "app": "a"})
    wep = pod_to_workload_endpoint(pod)
    assert wep is not None
    assert wep["metadata"]["labels"] == {
        "app": "a", "pcns.x": "y", "pcsa.z": "w",
        "projectcalico.org/namespace": "prod", "projectcalico.org/orchestrator": "k8s"}


def test_pod_label_cannot_spoof_namespace_label() -> None:
    pod = make_pod(labels={"projectcalico.org/namespace": "kube-system"})
    wep = pod_to_workload_endpoint(pod)
    assert wep is not None
    assert wep["metadata"]["labels"]["projectcalico.org/namespace"] == "prod"


def test_ipv6_only_pod() -> None:
    pod = make_pod(status={"phase": "Running", "podIPs": [{"ip": "fd00:10:244::a"}]})
    wep = pod_to_workload_endpoint(pod)
    assert wep is not None
    assert wep["spec"]["ipNetworks"] == ["fd00:10:244::a/128"]


def test_dual_stack_from_calico_annotation() -> None:
    pod = make_pod(status={"phase": "Running"},
                   annotations={"cni.projectcalico.org/podIPs": "10.0.0.1,FD00::0:1"})
    wep = pod_to_workload_endpoint(pod)
    assert wep is not None
    assert wep["spec"]["ipNetworks"] == ["10.0.0.1/32", "fd00::1/128"]


def test_ip_source_precedence() -> None:
    annotations = {"cni.projectcalico.org/podIP": "10.0.0.2",
                   "cni.projectcalico.org/podIPs": "10.0.0.3",
                   "vpc.amazonaws.com/pod-ips": "10.0.0.4"}
    status_ip = make_pod(status={"phase": "Running", "podIP": "10.0.0.1"},
                         annotations=annotations)
    assert spec_of(status_ip)["ipNetworks"] == ["10.0.0.1/32"]
    plural = make_pod(annotations=annotations)
    assert spec_of(plural)["ipNetworks"] == ["10.0.0.3/32"]
    singular = make_pod(annotations={k: v for k, v in annotations.items()
                                     if k != "cni.projectcalico.org/podIPs"})
    assert spec_of(singular)["ipNetworks"] == ["10.0.0.2/32"]
    aws = make_pod(annotations={"vpc.amazonaws.com/pod-ips": "10.0.0.4,10.0.0.5"})
    assert spec_of(aws)["ipNetworks"] == ["10.0.0.4/32", "10.0.0.5/32"]


def test_ip_annotation_with_prefix_is_masked() -> None:
    pod = make_pod(annotations={"cni.projectcalico.org/podIP": "10.0.0.9/24"})
    assert spec_of(pod)["ipNetworks"] == ["10.0.0.0/24"]


@pytest.mark.parametrize("bad", ["10.0.0.300", "fe80::1%eth0", "010.0.0.1", "10.0.0.1, fd00::1"])
def test_bad_pod_ip_fails_conversion(bad: str) -> None:
    with pytest.raises(ConversionError):
        pod_to_workload_endpoint(make_pod(annotations={"cni.projectcalico.org/podIPs": bad}))


def test_deleting_pod_whose_cni_released_the_ip_is_finished() -> None:
    pod = make_pod(status={"phase": "Running", "podIP": "10.0.0.1"},
                   annotations={"cni.projectcalico.org/podIP": ""},
                   deletionTimestamp="2024-05-01T10:00:00Z")
    assert "ipNetworks" not in spec_of(pod)
    aws = make_pod(status={"phase": "Running", "podIP": "10.0.0.1"},
                   annotations={"vpc.amazonaws.com/pod-ips": ""},
                   deletionTimestamp="2024-05-01T10:00:00Z")
    assert "ipNetworks" not in spec_of(aws)


def test_deleting_pod_without_release_signal_keeps_ips() -> None:
    pod = make_pod(status={"phase": "Running", "podIP": "10.0.0.1"},
                   deletionTimestamp="2024-05-01T10:00:00Z")
    assert spec_of(pod)["ipNetworks"] == ["10.0.0.1/32"]
    # The empty annotation only counts while the pod is being deleted.
    running = make_pod(status={"phase": "Running", "podIP": "10.0.0.1"},
                       annotations={"cni.projectcalico.org/podIP": ""})
    assert spec_of(running)["ipNetworks"] == ["10.0.0.1/32"]


def test_long_service_account_name_drops_label_but_keeps_profile() -> None:
    sa = "s" * 63
    wep = pod_to_workload_endpoint(make_pod(sa=sa))
    assert wep is not None
    assert "projectcalico.org/serviceaccount" not in wep["metadata"]["labels"]
    assert wep["spec"]["serviceAccountName"] == sa
    assert wep["spec"]["profiles"] == ["kns.prod", f"ksa.prod.{sa}"]
    short = pod_to_workload_endpoint(make_pod(sa="s" * 62))
    assert short is not None
    assert short["metadata"]["labels"]["projectcalico.org/serviceaccount"] == "s" * 62


def test_ports_from_containers_then_init_containers() -> None:
    pod = make_pod()
    pod["spec"]["containers"] = [{"name": "a", "ports": [
        {"name": "dns", "containerPort": 53, "protocol": "UDP"},
        {"containerPort": 8443, "hostPort": 443, "hostIP": "10.0.0.1"},  # unnamed, host-mapped
        {"containerPort": 9000},                                      # unnamed: skipped
        {"name": "weird", "containerPort": 7, "protocol": "ICMP"},    # unknown protocol
        {"name": "zero", "containerPort": 0},                         # no container port
    ]}]
    pod["spec"]["initContainers"] = [{"name": "i", "ports": [
        {"name": "sctp-port", "containerPort": 3868, "protocol": "SCTP"}]}]
    wep = pod_to_workload_endpoint(pod)
    assert wep is not None
    assert wep["spec"]["ports"] == [
        {"name": "dns", "protocol": "UDP", "port": 53, "hostPort": 0, "hostIP": ""},
        {"name": "", "protocol": "TCP", "port": 8443, "hostPort": 443, "hostIP": "10.0.0.1"},
        {"name": "sctp-port", "protocol": "SCTP", "port": 3868, "hostPort": 0, "hostIP": ""},
    ]


def test_container_id_and_network_status_annotation() -> None:
    pod = make_pod(annotations={"cni.projectcalico.org/containerID": "abc123",
                                "k8s.v1.cni.cncf.io/network-status": "[{\"name\":\"x\"}]",
                                "unrelated": "dropped"})
    wep = pod_to_workload_endpoint(pod)
    assert wep is not None
    assert wep["spec"]["containerID"] == "abc123"
    assert wep["metadata"]["annotations"] == {
        "k8s.v1.cni.cncf.io/network-status": "[{\"name\":\"x\"}]"}


def test_floating_ips_dual_stack() -> None:
    pod = make_pod(status={"phase": "Running",
                           "podIPs": [{"ip": "192.168.0.1"}, {"ip": "fd80:24e2:f998:72d6::1"}]},
                   annotations={"cni.projectcalico.org/floatingIPs":
                                "[\"1.1.1.1\", \"2001:647f::21\"]"})
    wep = pod_to_workload_endpoint(pod)
    assert wep is not None
    assert wep["spec"]["ipNATs"] == [
        {"internalIP": "192.168.0.1", "externalIP": "1.1.1.1"},
        {"internalIP": "fd80:24e2:f998:72d6::1", "externalIP": "2001:647f::21"},
    ]


def test_floating_ips_need_a_pod_ip_of_that_family_and_live_ips() -> None:
    annotations = {"cni.projectcalico.org/floatingIPs": "[\"1.1.1.1\", \"2001:db8::1\"]"}
    v4_only = make_pod(status={"phase": "Running", "podIP": "192.168.0.1"},
                       annotations=annotations)
    assert spec_of(v4_only)["ipNATs"] == [
        {"internalIP": "192.168.0.1", "externalIP": "1.1.1.1"}]
    finished = make_pod(status={"phase": "Succeeded", "podIP": "192.168.0.1"},
                        annotations=annotations)
    assert "ipNATs" not in spec_of(finished)


def test_floating_ips_with_non_host_pod_ip_or_bad_json_fail() -> None:
    with pytest.raises(ConversionError):
        pod_to_workload_endpoint(make_pod(
            annotations={"cni.projectcalico.org/podIP": "192.168.0.0/24",
                         "cni.projectcalico.org/floatingIPs": "[\"1.1.1.1\"]"}))
    with pytest.raises(ConversionError):
        pod_to_workload_endpoint(make_pod(
            status={"phase": "Running", "podIP": "192.168.0.1"},
            annotations={"cni.projectcalico.org/floatingIPs": "1.1.1.1"}))


def test_allowed_source_prefixes() -> None:
    annotation = "cni.projectcalico.org/allowedSourcePrefixes"
    wep = pod_to_workload_endpoint(make_pod(
        annotations={annotation: "[\"8.8.8.8/32\",\"1.1.1.1/16\",\"fd00::1/64\"]"}))
    assert wep is not None
    assert wep["spec"]["allowSpoofedSourcePrefixes"] == ["8.8.8.8/32", "1.1.0.0/16", "fd00::/64"]
    assert "allowSpoofedSourcePrefixes" not in spec_of(make_pod(annotations={annotation: ""}))
    for bad in ("[\"\"]", "[\"gumbo\"]", "[\"10.0.0.1\"]", "{}"):
        with pytest.raises(ConversionError):
            pod_to_workload_endpoint(make_pod(annotations={annotation: bad}))


def _qos(annotations: dict[str, str]) -> Any:
    wep = pod_to_workload_endpoint(make_pod(annotations=annotations))
    assert wep is not None
    return wep["spec"].get("qosControls")


def test_qos_controls_valid_annotations() -> None:
    # Calico's own conversion test vector.
    p = "qos.projectcalico.org/"
    assert _qos({
        p + "ingressBandwidth": "1M", p + "egressBandwidth": "2M",
        p + "ingressBurst": "3M", p + "egressBurst": "4M",
        p + "ingressPeakrate": "5M", p + "egressPeakrate": "6M",
        p + "ingressMinburst": "7M", p + "egressMinburst": "8M",
        p + "ingressPacketRate": "2k", p + "egressPacketRate": "9k",
        p + "ingressPacketBurst": "1k", p + "egressPacketBurst": "10k",
        p + "ingressMaxConnections": "13M", p + "egressMaxConnections": "14M",
        p + "dscp": "cs5",
    }) == {
        "ingressBandwidth": 1000000, "ingressBurst": 3000000, "ingressPeakrate": 5000000,
        "ingressMinburst": 7000000, "egressBandwidth": 2000000, "egressBurst": 4000000,
        "egressPeakrate": 6000000, "egressMinburst": 8000000, "ingressPacketRate": 2000,
        "ingressPacketBurst": 1000, "egressPacketRate": 9000, "egressPacketBurst": 10000,
        "ingressMaxConnections": 13000000, "egressMaxConnections": 14000000, "dscp": "CS5",
    }


def test_qos_controls_are_pinned_to_their_ranges() -> None:
    p = "qos.projectcalico.org/"
    assert _qos({
        p + "ingressBandwidth": "1", p + "egressBandwidth": "20P",
        p + "ingressBurst": "3", p + "egressBurst": "40P",
        p + "ingressPeakrate": "5", p + "egressPeakrate": "50P",
        p + "ingressMinburst": "7", p + "egressMinburst": "8Gi",
        p + "ingressPacketRate": "0", p + "egressPacketRate": "60P",
        p + "ingressPacketBurst": "0", p + "egressPacketBurst": "70P",
        p + "ingressMaxConnections": "0", p + "egressMaxConnections": "80P",
    }) == {
        "ingressBandwidth": 1000, "ingressBurst": 1000, "ingressPeakrate": 1010,
        "ingressMinburst": 1000, "egressBandwidth": 1000000000000000,
        "egressBurst": 34359738360, "egressPeakrate": 1010000000000000,
        "egressMinburst": 100000000, "ingressPacketRate": 1, "ingressPacketBurst": 1,
        "egressPacketRate": 10000, "egressPacketBurst": 10000, "ingressMaxConnections": 1,
        "egressMaxConnections": 4294967295,
    }


@pytest.mark.parametrize("field", ["Burst", "Peakrate", "Minburst", "PacketBurst"])
def test_qos_limits_without_their_companion_are_dropped(field: str) -> None:
    p = "qos.projectcalico.org/"
    assert _qos({f"{p}ingress{field}": "3M", f"{p}egress{field}": "4M"}) is None


def test_qos_defaults_and_kubernetes_bandwidth_annotations() -> None:
    assert _qos({"kubernetes.io/ingress-bandwidth": "10M",
                 "kubernetes.io/egress-bandwidth": "1Mi",
                 "qos.projectcalico.org/egressBandwidth": "20M",
                 "qos.projectcalico.org/ingressPacketRate": "100"}) == {
        "ingressBandwidth": 10_000_000, "ingressBurst": 4 * 2**30,
        "egressBandwidth": 20_000_000, "egressBurst": 4 * 2**30,
        "ingressPacketRate": 100, "ingressPacketBurst": 5,
    }


def test_qos_peakrate_must_exceed_bandwidth_and_bad_values_zero() -> None:
    p = "qos.projectcalico.org/"
    assert _qos({p + "ingressBandwidth": "5M", p + "ingressPeakrate": "5M",
                 p + "egressBandwidth": "junk"}) == {
        "ingressBandwidth": 5_000_000, "ingressBurst": 4 * 2**30}


@pytest.mark.parametrize(("text", "expected"), [
    ("46", 46), ("063", 63), ("EF", "EF"), ("af11", "AF11"), (" ef ", " ef "),
    ("64", None), ("bogus", None), ("", None),
])
def test_qos_dscp(text: str, expected: Any) -> None:
    qos = _qos({"qos.projectcalico.org/dscp": text})
    assert qos == (None if expected is None else {"dscp": expected})


def test_interface_name_and_prefix() -> None:
    assert veth_name_for_workload("default", "podA") == "cali7f94ce7c295"
    assert veth_name_for_workload("prod", "web-1") == "cali91bef8fbcc9"
    assert interface_prefix_from_env(None) == "cali"
    assert interface_prefix_from_env("") == "cali"
    assert interface_prefix_from_env("tap,cali") == "tap"
    wep = pod_to_workload_endpoint(make_pod(name="podA", namespace="default"),
                                   interface_prefix="tap")
    assert wep is not None
    assert wep["spec"]["interfaceName"] == "tap7f94ce7c295"


def test_workload_endpoint_name_escaping() -> None:
    assert workload_endpoint_name("node-1", "web-1") == "node--1-k8s-web--1-eth0"
    assert workload_endpoint_name("n", "a--b") == "n-k8s-a----b-eth0"
    for node, pod in (("-n", "p"), ("n-", "p"), ("n", "-p"), ("n", "")):
        with pytest.raises(ConversionError):
            workload_endpoint_name(node, pod)


def test_input_is_not_modified() -> None:
    pod = copy.deepcopy(G4_POD)
    pod_to_workload_endpoint(pod)
    assert pod == G4_POD
