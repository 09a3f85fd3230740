"""Settings from the environment: a bad value stops start-up naming the variable
(STYLE "Configuration"; SPEC L1 for the level table)."""

from __future__ import annotations

from pathlib import Path

import pytest

from clepsydra_core.errors import ConfigError
from clepsydra_core.levels import DelayLevels
from clepsydra_core.settings import (
    CommonSettings,
    env_bool,
    env_choice,
    env_float,
    env_int,
    env_levels,
    env_str,
)


def test_env_str_treats_empty_as_unset() -> None:
    assert env_str({}, "CLEPSYDRA_X", "d") == "d"
    assert env_str({"CLEPSYDRA_X": ""}, "CLEPSYDRA_X", "d") == "d"
    assert env_str({"CLEPSYDRA_X": "v"}, "CLEPSYDRA_X", "d") == "v"


def test_env_int_reads_and_names_the_variable() -> None:
    assert env_int({}, "CLEPSYDRA_N", 5) == 5
    assert env_int({"CLEPSYDRA_N": "12"}, "CLEPSYDRA_N", 5) == 12
    with pytest.raises(ConfigError, match="CLEPSYDRA_N='twelve'"):
        env_int({"CLEPSYDRA_N": "twelve"}, "CLEPSYDRA_N", 5)
    with pytest.raises(ConfigError, match="CLEPSYDRA_N=0 must be at least 1"):
        env_int({"CLEPSYDRA_N": "0"}, "CLEPSYDRA_N", 5, minimum=1)
    with pytest.raises(ConfigError, match="CLEPSYDRA_N=1001 must be at most 1000"):
        env_int({"CLEPSYDRA_N": "1001"}, "CLEPSYDRA_N", 5, maximum=1000)
    assert env_int({"CLEPSYDRA_N": "1000"}, "CLEPSYDRA_N", 5, maximum=1000) == 1000


def test_env_float_reads_and_names_the_variable() -> None:
    assert env_float({"CLEPSYDRA_F": "0.25"}, "CLEPSYDRA_F", 1.0) == 0.25
    with pytest.raises(ConfigError, match="CLEPSYDRA_F"):
        env_float({"CLEPSYDRA_F": "fast"}, "CLEPSYDRA_F", 1.0)
    with pytest.raises(ConfigError, match="CLEPSYDRA_F"):
        env_float({"CLEPSYDRA_F": "-1"}, "CLEPSYDRA_F", 1.0, minimum=0.0)


@pytest.mark.parametrize(("raw", "value"), [("1", True), ("true", True), (" Yes ", True),
                                            ("on", True), ("0", False), ("FALSE", False),
                                            ("no", False), ("off", False), ("", True)])
def test_env_bool_accepts_the_usual_words(raw: str, value: bool) -> None:
    assert env_bool({"CLEPSYDRA_B": raw}, "CLEPSYDRA_B", True) is value


def test_env_bool_and_choice_name_the_variable() -> None:
    with pytest.raises(ConfigError, match="CLEPSYDRA_B"):
        env_bool({"CLEPSYDRA_B": "maybe"}, "CLEPSYDRA_B", True)
    assert env_choice({}, "CLEPSYDRA_FLUSH", "async", ("async", "sync")) == "async"
    with pytest.raises(ConfigError, match=r"CLEPSYDRA_FLUSH='sometimes'.*async, sync"):
        env_choice({"CLEPSYDRA_FLUSH": "sometimes"}, "CLEPSYDRA_FLUSH", "async",
                   ("async", "sync"))


def test_delay_levels_setting_names_variable_and_entry() -> None:  # SPEC L1
    assert env_levels({}) == DelayLevels.default()
    assert env_levels({"CLEPSYDRA_DELAY_LEVELS": "1s 2s 3s"}).max_level == 3
    with pytest.raises(ConfigError) as info:
        env_levels({"CLEPSYDRA_DELAY_LEVELS": "1s 2s 3q"})
    assert "CLEPSYDRA_DELAY_LEVELS" in str(info.value)
    assert "level 3" in str(info.value) and "'3q'" in str(info.value)


def test_common_settings_defaults_start_a_local_stack() -> None:
    settings = CommonSettings.from_env({})
    assert settings.home == Path(".clepsydra").absolute()
    assert settings.store_url == "http://127.0.0.1:8081"
    assert settings.retry_url == "http://127.0.0.1:8082"
    assert settings.redis_url is None
    assert settings.effective_redis_url == "redis://127.0.0.1:6380/0"
    assert settings.delay_levels.max_level == 18
    assert settings.otel_exporter == "none"


def test_common_settings_follow_ports_and_explicit_urls(tmp_path: Path) -> None:
    env = {"CLEPSYDRA_HOME": str(tmp_path), "CLEPSYDRA_STORE_PORT": "9001",
           "CLEPSYDRA_RETRY_URL": "http://retry:80", "CLEPSYDRA_REDIS_PORT": "6999",
           "CLEPSYDRA_LOG_LEVEL": "debug"}
    settings = CommonSettings.from_env(env)
    assert settings.home == tmp_path
    assert settings.store_url == "http://127.0.0.1:9001"
    assert settings.retry_url == "http://retry:80"
    assert settings.effective_redis_url == "redis://127.0.0.1:6999/0"
    assert settings.log_level == "DEBUG"
    external = CommonSettings.from_env({"CLEPSYDRA_REDIS_URL": "redis://cache:6379/2"})
    assert external.effective_redis_url == "redis://cache:6379/2"


@pytest.mark.parametrize(("name", "value"), [("CLEPSYDRA_STORE_PORT", "http"),
                                             ("CLEPSYDRA_RETRY_PORT", "0"),
                                             ("CLEPSYDRA_REDIS_PORT", "-5"),
                                             ("CLEPSYDRA_DELAY_LEVELS", "1s nope")])
def test_common_settings_refuse_bad_values_naming_them(name: str, value: str) -> None:
    with pytest.raises(ConfigError, match=name):
        CommonSettings.from_env({name: value})


def test_auth_settings_off_by_default_and_on_needs_tokens(tmp_path: Path) -> None:
    """CLEPSYDRA_AUTH off by default; on needs a tokens file or an admin token."""
    from clepsydra_core.settings import AuthSettings

    off = AuthSettings.from_env({}, tmp_path)
    assert not off.enabled
    with pytest.raises(ConfigError, match="CLEPSYDRA_AUTH_TOKENS_FILE"):
        AuthSettings.from_env({"CLEPSYDRA_AUTH": "on"}, tmp_path)
    on = AuthSettings.from_env({"CLEPSYDRA_AUTH": "on",
                                "CLEPSYDRA_AUTH_TOKENS_FILE": str(tmp_path / "t.json")}, tmp_path)
    assert on.enabled and on.tokens_file == tmp_path / "t.json"
    with pytest.raises(ConfigError, match="CLEPSYDRA_AUTH"):
        AuthSettings.from_env({"CLEPSYDRA_AUTH": "yes"}, tmp_path)
    common = CommonSettings.from_env({"CLEPSYDRA_TOKEN": "clp_client",
                                       "CLEPSYDRA_AUTH_ADMIN_TOKEN": "clp_bootstrap"})
    assert common.token == "clp_client" and "clp_" not in repr(common)
