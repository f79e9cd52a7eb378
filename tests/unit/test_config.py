"""Config: Typha's env names, file, flags, precedence and named errors."""

from __future__ import annotations

import pytest

from trio_typha.config import ConfigError, load_config


def cfg(env=None, **kw):
    return load_config(env or {}, config_file=kw.pop("config_file", None), **kw)


def test_defaults_match_typha(tmp_path) -> None:
    c = cfg({"TYPHA_CONFIGFILE": str(tmp_path / "absent.cfg")})
    assert c.port == 5473 and c.server_port == 0
    assert c.datastore_type == "etcdv3"
    assert c.health_port == 9098 and not c.health_enabled
    assert c.server_ping_interval_secs == 10 and c.server_pong_timeout_secs == 60
    assert c.snapshot_cache_max_batch_size == 100 and c.server_max_message_size == 100


def test_env_names_are_case_insensitive_and_parse() -> None:
    c = cfg({"TYPHA_SERVERPORT": "5474", "typha_healthenabled": "yes",
             "Typha_LoGSEVERITYSCREEN": "debug", "TYPHA_SERVERPINGINTERVALSECS": "0.5",
             "TYPHA_ETCDENDPOINTS": "http://127.0.0.1:2379,https://e2:2379/"})
    assert c.port == 5474 and c.health_enabled and c.log_severity_screen == "DEBUG"
    assert c.server_ping_interval_secs == 0.5
    assert c.etcd_endpoints == ("http://127.0.0.1:2379/", "https://e2:2379/")


def test_precedence_file_env_flags(tmp_path) -> None:
    f = tmp_path / "typha.cfg"
    f.write_text("[global]\nServerPort = 6000\nHealthPort = 7000\nLogSeverityScreen = Warning\n")
    c = load_config({"TYPHA_SERVERPORT": "6001"}, config_file=str(f),
                    overrides={"LogSeverityScreen": "error"})
    assert c.health_port == 7000  # file beats default
    assert c.port == 6001  # env beats file
    assert c.log_severity_screen == "ERROR"  # flag beats both


def test_empty_value_ignored_and_none_zeroes() -> None:
    c = cfg({"TYPHA_HEALTHPORT": "", "TYPHA_HEALTHHOST": "none"})
    assert c.health_port == 9098 and c.health_host == ""


@pytest.mark.parametrize(("env", "needle"), [
    ({"TYPHA_SERVERPORT": "70000"}, "TYPHA_SERVERPORT"),
    ({"TYPHA_SERVERPORT": "abc"}, "0..65535"),
    ({"TYPHA_DATASTORETYPE": "mongo"}, "kubernetes, etcdv3, memory"),
    ({"TYPHA_DATASTORETYPE": "none"}, "TYPHA_DATASTORETYPE"),
    ({"TYPHA_HEALTHENABLED": "perhaps"}, "TYPHA_HEALTHENABLED"),
    ({"TYPHA_SERVERPONGTIMEOUTSECS": "soon"}, "seconds"),
    ({"TYPHA_ETCDENDPOINTS": "127.0.0.1:2379"}, "TYPHA_ETCDENDPOINTS"),
    ({"TYPHA_CLIENTCN": "felix"}, "TYPHA_SERVERKEYFILE"),
    ({"TYPHA_CAFILE": "/nonexistent/ca.pem"}, "TYPHA_CAFILE"),
])
def test_invalid_values_name_the_variable(env, needle) -> None:
    with pytest.raises(ConfigError, match=needle):
        cfg(env)


def test_explicit_missing_config_file_is_an_error(tmp_path) -> None:
    with pytest.raises(ConfigError, match="does not exist"):
        load_config({}, config_file=str(tmp_path / "missing.cfg"))


def test_sectionless_file_accepted(tmp_path) -> None:
    f = tmp_path / "t.cfg"
    f.write_text("ServerPort = 6100\n")
    assert load_config({}, config_file=str(f)).port == 6100
