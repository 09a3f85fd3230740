"""Who may call which route of the retry service (clepsydra_web.auth): a consumer
sends back for its groups, an admin manages groups and DLQs; the roles are clepsydra_core.auth's.
"""

from __future__ import annotations

from clepsydra_core.auth import Action
from clepsydra_web.auth import Need, PermissionTable

RETRY_ACCESS: PermissionTable = {
    "groups.list_groups": Need(Action.GROUP_READ),
    "groups.put_group": Need(Action.GROUP_ADMIN, "group"),
    "groups.get_group": Need(Action.GROUP_READ, "group"),
    "send_back.send_back_one": Need(Action.GROUP_CONSUME, "group"),
    "send_back.send_back_batch": Need(Action.GROUP_CONSUME, "group"),
    "dlq.list_dlq": Need(Action.DLQ_READ, "group"),
    "dlq.dlq_audit": Need(Action.DLQ_READ, "group"),
    "dlq.show_dlq": Need(Action.DLQ_READ, "group"),
    "dlq.resend_dlq": Need(Action.DLQ_ADMIN, "group"),
    "dlq.purge_dlq": Need(Action.DLQ_ADMIN, "group"),
    "dlq.delete_dlq": Need(Action.DLQ_ADMIN, "group"),
}
