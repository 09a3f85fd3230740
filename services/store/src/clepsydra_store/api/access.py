"""Who may call which store route (issue 16): endpoint -> the action it needs and the view
argument naming its topic or group (clepsydra_web.auth). The roles' side of it is
clepsydra_core.auth. The produce fast path checks ``SEND`` on its topic the same way
(api/fastpath.py)."""

from __future__ import annotations

from clepsydra_core.auth import Action
from clepsydra_web.auth import Need, PermissionTable

STORE_ACCESS: PermissionTable = {
    # topics
    "topics.create_topic": Need(Action.TOPIC_ADMIN),
    "topics.list_topics": Need(Action.TOPIC_READ),
    "topics.get_topic": Need(Action.TOPIC_READ),
    "topics.update_topic": Need(Action.TOPIC_ADMIN, "topic"),
    "topics.delete_topic": Need(Action.TOPIC_ADMIN, "topic"),
    # messages
    "messages.produce_message": Need(Action.SEND, "topic"),
    "messages.produce_batch": Need(Action.SEND, "topic"),
    "messages.get_message": Need(Action.MESSAGE_READ),
    "messages.find_messages": Need(Action.MESSAGE_READ),
    "messages.get_commitlog": Need(Action.MESSAGE_READ),
    "history.get_history": Need(Action.MESSAGE_READ),
    "queues.pull": Need(Action.PULL, "topic"),
    # timers (issue 15): SEND, checked again in the view on the message's own topic
    "timers.cancel_message": Need(Action.SEND),
    "timers.reschedule_message": Need(Action.SEND),
    "timers.cancel_by_key": Need(Action.SEND),
    "timers.reschedule_by_key": Need(Action.SEND),
    # groups: a consumer commits, heartbeats and reads its own groups; settings are admin's
    # and the retry service's (it keeps them here)
    "groups.list_groups": Need(Action.GROUP_READ),
    "groups.put_group_settings": Need(Action.GROUP_ADMIN, "group"),
    "groups.get_group_settings": Need(Action.GROUP_READ, "group"),
    "groups.commit_offset": Need(Action.GROUP_CONSUME, "group"),
    "groups.get_offsets": Need(Action.GROUP_READ, "group"),
    "groups.heartbeat": Need(Action.GROUP_CONSUME, "group"),
    "groups.list_consumers": Need(Action.GROUP_READ, "group"),
    "groups.unregister_consumer": Need(Action.GROUP_CONSUME, "group"),
    # orderly consumers' queue locks (api/locks.py)
    "locks.lock_queues": Need(Action.GROUP_CONSUME, "group"),
    "locks.unlock_queues": Need(Action.GROUP_CONSUME, "group"),
    "locks.list_locks": Need(Action.GROUP_READ, "group"),
    # the scheduler's hand-over
    "schedule.levels": Need(Action.SCHEDULE_READ),
    "schedule.entries": Need(Action.SCHEDULE_READ),
    "schedule.handover": Need(Action.SCHEDULE_HANDOVER),
    "timers.timer_backlog": Need(Action.SCHEDULE_READ),
    "timers.timer_handover": Need(Action.SCHEDULE_HANDOVER),
    # the retry service's internal routes
    "internal.create_system_topic": Need(Action.INTERNAL_COPY),
    "internal.copy": Need(Action.INTERNAL_COPY),
    "internal.copy_range": Need(Action.INTERNAL_COPY),
    # the cluster of store shards (api/cluster.py, DEC-store-shards)
    "cluster.self_status": Need(Action.TOPIC_READ),
    "cluster.members": Need(Action.TOPIC_READ),
    "cluster.route": Need(Action.TOPIC_READ),
    "cluster.drain": Need(Action.CLUSTER_ADMIN),
    "cluster.resume": Need(Action.CLUSTER_ADMIN),
    # tokens (api/tokens.py)
    "auth.list_tokens": Need(Action.AUTH_ADMIN),
    "auth.create": Need(Action.AUTH_ADMIN),
    "auth.revoke": Need(Action.AUTH_ADMIN),
}
