"""The delay-level table: parse (SPEC L1), clamp (L2), level <-> schedule queue (L3)."""

from __future__ import annotations

import pytest

from clepsydra_core.errors import ConfigError, ValidationError
from clepsydra_core.levels import DEFAULT_LEVELS, DelayLevels, format_delay


def test_default_table_has_18_levels() -> None:  # SPEC L1
    levels = DelayLevels.default()
    assert levels.max_level == 18
    assert levels.delay_ms(1) == 1_000
    assert levels.delay_ms(5) == 60_000
    assert levels.delay_ms(18) == 2 * 3_600_000
    assert str(levels) == DEFAULT_LEVELS
    assert list(levels.levels()) == list(range(1, 19))


def test_units_s_m_h_d() -> None:  # SPEC L1
    levels = DelayLevels.parse("7s 3m  2h\t1d")
    assert levels.delays_ms == (7_000, 180_000, 7_200_000, 86_400_000)
    assert str(levels) == "7s 3m 2h 1d"


@pytest.mark.parametrize("bad", ["1x", "0s", "-1s", "1.5s", "s", "10", "1S", "5ms", "1s1"])
def test_malformed_entry_is_named_in_the_error(bad: str) -> None:  # SPEC L1: fail fast
    with pytest.raises(ConfigError) as info:
        DelayLevels.parse(f"1s 5s {bad} 1m")
    assert "level 3" in str(info.value)
    assert repr(bad) in str(info.value)
    assert "L1" in str(info.value)


@pytest.mark.parametrize("table", ["", "   ", "\n"])
def test_empty_table_is_refused(table: str) -> None:  # SPEC L1
    with pytest.raises(ConfigError, match="empty"):
        DelayLevels.parse(table)


def test_clamp_keeps_zero_and_caps_at_max() -> None:  # SPEC L2
    levels = DelayLevels.parse("1s 2s 3s")
    assert levels.clamp(0) == 0
    assert levels.delay_ms(0) == 0
    assert levels.clamp(2) == 2
    assert levels.clamp(3) == 3
    assert levels.clamp(4) == 3
    assert levels.clamp(1000) == 3
    assert levels.delay_ms(99) == 3_000


def test_negative_level_is_refused() -> None:  # SPEC L2
    levels = DelayLevels.default()
    with pytest.raises(ValidationError) as info:
        levels.clamp(-1)
    assert info.value.code == "INVALID_DELAY_LEVEL"
    assert info.value.http_status == 400
    assert "L2" in info.value.message
    with pytest.raises(ValidationError):
        levels.delay_ms(-5)


def test_queue_id_is_level_minus_one_both_ways() -> None:  # SPEC L3
    levels = DelayLevels.default()
    for level in levels.levels():
        assert levels.queue_id(level) == level - 1
        assert levels.level_of_queue(levels.queue_id(level)) == level
    assert levels.queue_id(99) == 17  # clamped first (L2)
    with pytest.raises(ValueError):
        levels.queue_id(0)


def test_format_delay_picks_the_largest_exact_unit() -> None:
    assert format_delay(90_000) == "90s"
    assert format_delay(120_000) == "2m"
    assert format_delay(86_400_000) == "1d"
    assert format_delay(1_500) == "1500ms"
