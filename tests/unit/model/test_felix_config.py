"""ClusterInformation / FelixConfiguration → config keys
(``libcalico-go/lib/backend/syncersv1/updateprocessors/configurationprocessor.go``,
``felixconfigprocessor.go``, ``clusterinfoprocessor.go``)."""

from __future__ import annotations

from trio_typha.model.felix_config import config_kvs


def _kv(triples: list[tuple[str, bytes, str]]) -> dict[str, bytes]:
    return {k: v for k, v, _ in triples}


def test_cluster_information() -> None:
    ci = {"metadata": {"name": "default"}, "spec": {
        "clusterGUID": "0123abcd", "clusterType": "typha,kdd,k8s", "calicoVersion": "v3.31.0",
        "datastoreReady": True}}
    assert config_kvs("ClusterInformation", "default", ci) == [
        ("/calico/v1/config/ClusterGUID", b"0123abcd", ""),
        ("/calico/v1/config/ClusterType", b"typha,kdd,k8s", ""),
        ("/calico/v1/config/CalicoVersion", b"v3.31.0", ""),
        ("/calico/v1/Ready", b"true", ""),
    ]


def test_cluster_information_per_node_and_other_names() -> None:
    ci = {"metadata": {"name": "node.n1", "annotations": {"config.projectcalico.org/X": "y"}},
          "spec": {"clusterGUID": "g", "datastoreReady": False}}
    # No ready flag per node, and ClusterInformation ignores config annotations.
    assert config_kvs("ClusterInformation", "node.n1", ci) == [
        ("/calico/v1/host/n1/config/ClusterGUID", b"g", "")]
    other = {"metadata": {"name": "x", "resourceVersion": "5"}, "spec": {}}
    [(key, value, rv)] = config_kvs("ClusterInformation", "x", other)
    assert key == "/calico/resources/v3/projectcalico.org/clusterinformations/x"
    assert rv == "5" and b"resourceVersion" not in value


def test_felix_configuration() -> None:
    fc = {"metadata": {"name": "default",
                       "annotations": {"config.projectcalico.org/Foo": "bar"}},
          "spec": {"logSeverityScreen": "Info", "reportingInterval": "0s", "ipipEnabled": True,
                   "failsafeInboundHostPorts": [{"protocol": "TCP", "port": 22},
                                                {"protocol": "UDP", "net": "fd00::/8",
                                                 "port": 68}]}}
    assert _kv(config_kvs("FelixConfiguration", "default", fc)) == {
        "/calico/v1/config/LogSeverityScreen": b"Info",
        "/calico/v1/config/ReportingIntervalSecs": b"0",
        "/calico/v1/config/IpInIpEnabled": b"true",
        "/calico/v1/config/FailsafeInboundHostPorts": b"tcp:22,udp:[fd00::/8]:68",
        "/calico/v1/config/Foo": b"bar",
    }
    node = {"metadata": {"name": "node.node-1"}, "spec": {"logSeverityScreen": "Debug"}}
    assert config_kvs("FelixConfiguration", "node.node-1", node) == [
        ("/calico/v1/host/node-1/config/LogSeverityScreen", b"Debug", "")]
    scoped = {"metadata": {"name": "edge-nodes"}, "spec": {"nodeSelector": "a == 'b'"}}
    assert config_kvs("FelixConfiguration", "edge-nodes", scoped)[0][0] == \
        "/calico/resources/v3/projectcalico.org/felixconfigurations/edge-nodes"


def test_value_stringification() -> None:
    fc = {"metadata": {"name": "default",
                       "annotations": {"config.projectcalico.org/LogSeverityFile": "Warning"}},
          "spec": {
              "logSeverityFile": "Debug",                       # overridden by annotation
              "iptablesRefreshInterval": "90s",                  # seconds
              "iptablesLockProbeInterval": "1.5ms",              # milliseconds
              "routeRefreshInterval": "1000000s",                # %v exponent form
              "netlinkTimeout": "100000s",
              "ipsetsRefreshInterval": "0.000001s",
              "iptablesLockTimeout": "5s",                       # not a v3.32 field
              "failsafeOutboundHostPorts": [],                   # "none"
              "routeTableRanges": [{"min": 1, "max": 250}, {"min": 300, "max": 400}],
              "routeTableRange": {"min": 1, "max": 250},
              "healthTimeoutOverrides": [{"name": "Loop", "timeout": "60s"}],
              "bpfConntrackTimeouts": {"tcpEstablished": "1h", "udpTimeout": "Auto"},
              "kubeNodePortRanges": ["30000:32767", 33000],
              "natPortRange": "32768:65535",
              "externalNodesList": ["10.0.0.1", "10.0.0.2"],
              "bpfLogFilters": {"b": "2", "a": "1"},
              "istioDSCPMark": "EF",
              "iptablesMarkMask": 4294901760,
              "wireguardEnabled": False,
              "logPrefix": "",                                   # unset
          }}
    kvs = _kv(config_kvs("FelixConfiguration", "default", fc))
    assert kvs == {
        "/calico/v1/config/LogSeverityFile": b"Warning",
        "/calico/v1/config/IptablesRefreshInterval": b"90",
        "/calico/v1/config/IptablesLockProbeIntervalMillis": b"1.5",
        "/calico/v1/config/RouteRefreshInterval": b"1e+06",
        "/calico/v1/config/NetlinkTimeoutSecs": b"100000",
        "/calico/v1/config/IpsetsRefreshInterval": b"1e-06",
        "/calico/v1/config/FailsafeOutboundHostPorts": b"none",
        "/calico/v1/config/RouteTableRanges": b"1-250,300-400",
        "/calico/v1/config/RouteTableRange": b"1-250",
        "/calico/v1/config/HealthTimeoutOverrides": b"Loop=1m0s",
        "/calico/v1/config/BPFConntrackTimeouts": b"TCPEstablished=1h,UDPTimeout=Auto",
        "/calico/v1/config/KubeNodePortRanges": b"[30000:32767 33000]",
        "/calico/v1/config/NATPortRange": b"32768:65535",
        "/calico/v1/config/ExternalNodesCIDRList": b"10.0.0.1,10.0.0.2",
        "/calico/v1/config/BPFLogFilters": b"a=1,b=2,",
        "/calico/v1/config/IstioDSCPMark": b"EF",
        "/calico/v1/config/IptablesMarkMask": b"4294901760",
        "/calico/v1/config/WireguardEnabled": b"false",
    }
