"""Where the configuration's values come from: this process's environment, the INI config
file, and the files the settings name.

This is the only module that reads the environment (tests/unit/test_config.py checks it);
:mod:`.config` declares and parses what it is handed.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping

from . import config
from .config import DEFAULT_CONFIG_FILE, PARAMS, Config, ConfigError

log = logging.getLogger(__name__)


def load_config(env: Mapping[str, str] | None = None, *, config_file: str | None = None,
                overrides: Mapping[str, str] | None = None, strict: bool = False) -> Config:
    """The configuration from ``env`` (default: this process's environment), the config
    file (``config_file``, else ``TYPHA_CONFIGFILE``, else the default path, skipped when
    absent) and ``overrides`` (flags), as :func:`.config.configure` merges them; a file a
    setting names must exist."""
    env = os.environ if env is None else env
    path = config_file or env.get("TYPHA_CONFIGFILE") or DEFAULT_CONFIG_FILE
    cfg = config.configure(env, ("config file " + path,
                                 _read_file(path, explicit=config_file is not None)),
                           overrides or {}, strict)
    _check_files(cfg)
    return cfg


def environment_config(env: Mapping[str, str] | None = None) -> Config:
    """The configuration the environment alone gives (no config file, no flags): for tools
    that need Calico's client settings, e.g. where the Kubernetes API is."""
    cfg = config.configure(os.environ if env is None else env, None, {})
    _check_files(cfg)
    return cfg


def early_log_level(env: Mapping[str, str] | None = None) -> str:
    """:func:`.config.early_log_level` of ``env`` (default: this process's environment)."""
    return config.early_log_level(os.environ if env is None else env)


def _read_file(path: str, explicit: bool) -> dict[str, str]:
    if not os.path.exists(path):
        if explicit:
            raise ConfigError(f"config file {path}: does not exist")
        log.info("Ignoring absent config file: %s", path)
        return {}
    try:
        with open(path, encoding="utf-8") as fh:
            text = fh.read()
    except OSError as exc:
        raise ConfigError(f"config file {path}: {exc}") from exc
    return config.parse_config_file(text, path)


def _check_files(cfg: Config) -> None:
    for p in PARAMS:
        value = getattr(cfg, p.field)
        if p.must_exist and value and not os.path.exists(value):
            raise ConfigError(f"{p.env}: invalid value {value!r}: file does not exist")
