"""Typha's remaining parameters and how configuration is reported (Typha's log lines)."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from trio_typha.config import ConfigError
from trio_typha.config_sources import load_config

# Every parameter of Typha v3.32 (typha/pkg/config), with a valid value for each.
TYPHA_V3_32 = {
    "DatastoreType": "kubernetes", "EtcdAddr": "127.0.0.1:2379", "EtcdScheme": "https",
    "EtcdKeyFile": "", "EtcdCertFile": "", "EtcdCaFile": "",
    "EtcdEndpoints": "https://10.0.0.1:2379", "LogFilePath": "none",
    "LogSeverityFile": "warning", "LogSeverityScreen": "info", "LogSeveritySys": "none",
    "HealthEnabled": "true", "HealthHost": "0.0.0.0", "HealthPort": "9098",
    "PrometheusMetricsEnabled": "true", "PrometheusMetricsHost": "0.0.0.0",
    "PrometheusMetricsPort": "9093", "PrometheusGoMetricsEnabled": "false",
    "PrometheusProcessMetricsEnabled": "false", "PrometheusMetricsCAFile": "",
    "PrometheusMetricsCertFile": "", "PrometheusMetricsKeyFile": "",
    "PrometheusMetricsClientAuth": "VerifyClientCertIfGiven",
    "SnapshotCacheMaxBatchSize": "50", "ServerMaxMessageSize": "50",
    "ServerMaxFallBehindSecs": "120", "ServerNewClientFallBehindGracePeriod": "60",
    "ServerMinBatchingAgeThresholdSecs": "0.02", "ServerPingIntervalSecs": "5",
    "ServerPongTimeoutSecs": "40", "ServerHandshakeTimeoutSecs": "5",
    "ServerWriteTimeoutSecs": "60", "ServerPort": "5473", "ServerHost": "0.0.0.0",
    "ServerKeyFile": "", "ServerCertFile": "", "CAFile": "", "ClientCN": "",
    "ClientURISAN": "", "DebugMemoryProfilePath": "/tmp/typha-<timestamp>.prof",
    "DebugDisableLogDropping": "true", "DebugHost": "localhost", "DebugPort": "6060",
    "ConnectionRebalancingMode": "kubernetes", "ConnectionDropIntervalSecs": "2",
    "ShutdownTimeoutSecs": "100", "ShutdownConnectionDropIntervalMaxSecs": "0.5",
    "MaxConnectionsUpperLimit": "5000", "MaxConnectionsLowerLimit": "100",
    "K8sServicePollIntervalSecs": "10", "K8sNamespace": "calico-system",
    "K8sServiceName": "calico-typha", "K8sPortName": "calico-typha",
}


def test_every_typha_parameter_is_accepted_from_the_environment(
        caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO)
    env = {f"TYPHA_{k.upper()}": v for k, v in TYPHA_V3_32.items()}
    cfg = load_config(env, config_file=None)
    assert "Ignoring unknown config param" not in caplog.text
    assert cfg.debug_port == 6060 and cfg.debug_disable_log_dropping is True
    assert cfg.log_file_path == "" and cfg.log_severity_sys == ""  # "none"
    assert cfg.log_severity_file == "WARNING"
    assert cfg.debug_memory_profile_path == "/tmp/typha-<timestamp>.prof"
    assert cfg.prometheus_metrics_client_auth == "VerifyClientCertIfGiven"


def test_startup_lines_as_typha_with_secrets_redacted(caplog: pytest.LogCaptureFixture
                                                      ) -> None:
    caplog.set_level(logging.INFO)
    load_config({"TYPHA_LOGSEVERITYSCREEN": "debug", "TYPHA_SERVERKEYFILE": "",
                 "TYPHA_SOMETOKEN": "hunter2", "TYPHA_HEALTHPORT": "9099"}, config_file=None)
    assert 'Found typha environment variable: TYPHA_LOGSEVERITYSCREEN="debug"' in caplog.text
    assert 'Found typha environment variable: TYPHA_SERVERKEYFILE=""' in caplog.text
    assert 'TYPHA_SOMETOKEN="<redacted>"' in caplog.text and "hunter2" not in caplog.text
    assert "Ignoring unknown config param TYPHA_SOMETOKEN" in caplog.text
    assert "Successfully loaded configuration. non-default: LogSeverityScreen=DEBUG, " \
           "HealthPort=9099" in caplog.text


def test_unknown_file_key_and_set_name_are_logged_and_ignored(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO)
    path = tmp_path / "typha.cfg"
    path.write_text("[global]\nMetadataAddr = None\nLogFilePath = None\nHealthPort = 9100\n")
    cfg = load_config({}, config_file=str(path), overrides={"NoSuchThing": "1"})
    assert cfg.health_port == 9100
    assert f"Ignoring unknown config param MetadataAddr (from config file {path})" \
        in caplog.text
    assert "Ignoring unknown config param NoSuchThing (from flag)" in caplog.text
    with pytest.raises(ConfigError, match="--set NoSuchThing: unknown parameter"):
        load_config({}, config_file=str(path), overrides={"NoSuchThing": "1"}, strict=True)
