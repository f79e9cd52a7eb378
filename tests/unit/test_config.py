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


# --- one declaration: the table, ServerSettings and --help derive from Config's fields ---


def test_every_config_field_is_a_declared_parameter() -> None:
    import dataclasses

    from trio_typha.config import PARAMS, Config

    assert [p.field for p in PARAMS] == [f.name for f in dataclasses.fields(Config)]
    assert len({p.name.lower() for p in PARAMS}) == len(PARAMS)
    assert all(p.doc for p in PARAMS)
    assert load_config({}, config_file=None) == Config()


def test_server_settings_defaults_are_the_parameters_defaults() -> None:
    import dataclasses

    from trio_typha.config import param_by_flag
    from trio_typha.sessions.settings import ServerSettings

    default = ServerSettings()
    assert ServerSettings.from_config(load_config({})) == default
    derived = [f for f in dataclasses.fields(ServerSettings) if "typha_param" in f.metadata]
    assert len(derived) >= 11
    for f in derived:
        p = param_by_flag(f.metadata["typha_param"])
        assert getattr(default, f.name) == p.effective(p.default)


@pytest.mark.parametrize(("name", "field", "expected"), [
    # Typha's built-in defaults for values <= 0 (the 100 ms batching age differs from the
    # 10 ms config default on purpose, as in Typha).
    ("ServerMinBatchingAgeThresholdSecs", "min_batching_age", 0.1),
    ("ServerPingIntervalSecs", "ping_interval", 10.0),
    ("ServerHandshakeTimeoutSecs", "handshake_timeout", 10.0),
    ("ServerWriteTimeoutSecs", "write_timeout", 120.0),
    ("ServerMaxFallBehindSecs", "max_fall_behind", 300.0),
    ("ServerNewClientFallBehindGracePeriod", "new_client_fall_behind_grace", 300.0),
])
def test_values_at_or_below_zero_get_typhas_builtin_default(name: str, field: str,
                                                            expected: float) -> None:
    from trio_typha.sessions.settings import ServerSettings

    for raw in ("0", "-3"):
        cfg = load_config({f"TYPHA_{name.upper()}": raw})
        assert getattr(ServerSettings.from_config(cfg), field) == expected
        assert cfg.effective(name) == expected


def test_pong_timeout_is_renormalized_not_redefaulted() -> None:
    from trio_typha.sessions.settings import ServerSettings

    cfg = load_config({"TYPHA_SERVERPINGINTERVALSECS": "5", "TYPHA_SERVERPONGTIMEOUTSECS": "0"})
    assert ServerSettings.from_config(cfg).pong_timeout == 30.0


def test_serve_help_lists_every_parameter(capsys: pytest.CaptureFixture[str]) -> None:
    from trio_typha.cli import main
    from trio_typha.config import PARAMS

    with pytest.raises(SystemExit):
        main(["serve", "--help"])
    out = capsys.readouterr().out
    for p in PARAMS:
        assert p.env in out and p.doc.split()[0] in out
