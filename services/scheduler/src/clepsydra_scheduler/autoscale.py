"""How many scheduler workers the waiting work needs: plain functions of the levels' backlog and
lag, with no Kubernetes and no clock of their own (``autoscaler.py`` runs them in a loop,
``kube.py`` applies the answer).

The model: each level is delivered by one task at a time (its lease in Redis), so a worker
carries whole levels. A level whose oldest waiting entry is due needs a share of a
worker: ``levels_per_worker`` due levels fit on one. A level later than ``lag_target_ms`` is
falling behind and gets a worker of its own. The entries waiting in due levels are spread at
``backlog_per_worker`` a worker. Entries not yet due need no worker, however many there are (a
2 h level may hold millions that are due tomorrow).

Within ``min_replicas``..``max_replicas``; scaling up is immediate, scaling down waits until
``cooldown_s`` have passed since the last change, so a burst does not make the workers flap.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum

from clepsydra_core.levels import DelayLevels
from clepsydra_core.schedule_rules import corrected_deliver_ts
from clepsydra_scheduler.ports import HandoverApi


@dataclass(frozen=True, slots=True)
class LevelLoad:
    """What waits in one level of the schedule topic."""

    level: int
    backlog: int
    """Entries not yet handed over to their real topic."""
    lag_ms: int = 0
    """now - deliver time of the oldest entry not handed over, when it is due; else 0."""
    due: bool = False
    """The oldest entry not handed over is due (a worker has work in this level now)."""


@dataclass(frozen=True, slots=True)
class ScalePolicy:
    min_replicas: int = 1
    max_replicas: int = 4
    cooldown_s: float = 300.0
    backlog_per_worker: int = 50_000
    levels_per_worker: int = 4
    lag_target_ms: int = 2_000

    def __post_init__(self) -> None:
        if not 0 <= self.min_replicas <= self.max_replicas:
            raise ValueError(f"need 0 <= min_replicas ({self.min_replicas}) <= max_replicas "
                             f"({self.max_replicas})")
        if self.backlog_per_worker < 1 or self.levels_per_worker < 1:
            raise ValueError("backlog_per_worker and levels_per_worker must be at least 1")


class ScaleReason(StrEnum):
    UP = "up"
    """The due work needs more workers than run."""
    DOWN = "down"
    """Fewer workers carry the due work, and the cool-down has passed."""
    STEADY = "steady"
    """The workers running are what the work needs."""
    COOLDOWN = "cooldown"
    """Fewer would do, but the last change is younger than the cool-down."""
    AT_MAX = "at_max"
    """The due work needs more than max_replicas; max_replicas run."""


@dataclass(frozen=True, slots=True)
class ScaleDecision:
    current: int
    desired: int
    needed: int
    """Workers the due work needs, before the bounds and the cool-down."""
    reason: ScaleReason

    @property
    def changed(self) -> bool:
        return self.desired != self.current


def needed_replicas(loads: Sequence[LevelLoad], policy: ScalePolicy) -> int:
    """Workers the due work needs: a worker for each level later than the lag target, the other
    due levels shared ``levels_per_worker`` a worker, and at least one worker per
    ``backlog_per_worker`` entries waiting in due levels."""
    due = [load for load in loads if load.due]
    late = sum(1 for load in due if load.lag_ms > policy.lag_target_ms)
    by_levels = late + math.ceil((len(due) - late) / policy.levels_per_worker)
    by_backlog = math.ceil(sum(load.backlog for load in due) / policy.backlog_per_worker)
    return max(by_levels, by_backlog)


def decide(loads: Sequence[LevelLoad], current: int, policy: ScalePolicy, *, now_s: float,
           last_change_s: float | None) -> ScaleDecision:
    """The replicas to set now. ``last_change_s`` is when this autoscaler last changed them
    (None: not since it started, so no cool-down holds)."""
    needed = needed_replicas(loads, policy)
    bounded = min(max(needed, policy.min_replicas), policy.max_replicas)
    if bounded > current:
        reason = ScaleReason.AT_MAX if needed > policy.max_replicas else ScaleReason.UP
        return ScaleDecision(current, bounded, needed, reason)
    if bounded < current:
        # a current count above max (set by hand) comes down to max at once
        if current <= policy.max_replicas and last_change_s is not None \
                and now_s - last_change_s < policy.cooldown_s:
            return ScaleDecision(current, current, needed, ScaleReason.COOLDOWN)
        return ScaleDecision(current, bounded, needed, ScaleReason.DOWN)
    reason = ScaleReason.AT_MAX if needed > policy.max_replicas else ScaleReason.STEADY
    return ScaleDecision(current, current, needed, reason)


def level_loads(store: HandoverApi, levels: DelayLevels, now_ms: int) -> list[LevelLoad]:
    """Each level's backlog (GET /v1/schedule/levels) and lag (the deliver time of its oldest
    entry not handed over, GET .../entries). StoreCallFailed (ports) when the store does not
    answer."""
    loads = []
    for info in store.levels():
        if info.level not in levels.levels():
            continue
        backlog = info.backlog
        lag_ms, due = 0, False
        if backlog:
            entries = store.entries(info.level, info.first_pending, 1)
            if entries.deliver_ts:
                deliver_ts = corrected_deliver_ts(entries.deliver_ts[0], now_ms,
                                                  levels.delay_ms(info.level))
                due = deliver_ts <= now_ms
                lag_ms = max(now_ms - deliver_ts, 0)
        loads.append(LevelLoad(info.level, backlog, lag_ms, due))
    return loads
