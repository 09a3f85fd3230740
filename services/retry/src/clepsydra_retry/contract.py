"""The retry service's HTTP contract: one :class:`~clepsydra_web.openapi.Route` per operation,
its values the wire types of :mod:`clepsydra_core.wire`. ``openapi.json`` is generated from it
(``make openapi``); a unit test holds the checked-in file equal to it.

Adding a route: add its ``Route(...)`` to :data:`ROUTES`, run ``make openapi``, commit both.
"""

from __future__ import annotations

from clepsydra_core.msgid import ID_PATTERN, MAX_SHARD
from clepsydra_core.validation import GROUP_MAX_LEN, GROUP_PATTERN
from clepsydra_core.wire.codec import INT64_MAX
from clepsydra_core.wire.dlq import (
    DlqAudit,
    DlqFilter,
    DlqMessage,
    DlqPage,
    DlqPurge,
    DlqResend,
    PurgeResult,
    ResendResult,
)
from clepsydra_core.wire.groups import (
    EXAMPLE_GROUP,
    GroupNames,
    GroupSettingsAnswer,
    GroupSettingsPatch,
)
from clepsydra_core.wire.retry import (
    RetryHealth,
    SendBackAnswer,
    SendBackItems,
    SendBackRequest,
    SendBackResults,
)
from clepsydra_retry.api import AUDIT_MAX, AUDIT_MAX_DEFAULT, LIST_MAX, LIST_MAX_DEFAULT
from clepsydra_web.openapi import Answer, Api, Param, Route, ops_routes

_MSG_ID = {"type": "string", "pattern": ID_PATTERN}

PATH_PARAMS = {
    "group": Param("group", {"type": "string", "pattern": GROUP_PATTERN,
                             "maxLength": GROUP_MAX_LEN},
                   "consumer group (letters, digits, _ - |)", example=EXAMPLE_GROUP),
    "msgId": Param("msgId", _MSG_ID, "the message's msgId (its newest visible dead letter), "
                   "or a dead-letter copy's offsetMsgId"),
}
_MS = {"type": "integer", "minimum": 0, "maximum": INT64_MAX}
FILTER_QUERY = (
    Param("topic", {"type": "string"}, "original topic (RETRY_TOPIC)"),
    Param("key", {"type": "string"}, "a key (KEYS) or UNIQ_KEY"),
    Param("reason", {"type": "string"}, "substring of DLQ_REASON or of a failure-history "
                                        "reason (case-insensitive)"),
    Param("fromMs", _MS, "dead-lettered at or after (epoch ms)"),
    Param("toMs", _MS, "dead-lettered before (epoch ms); at or before fromMs selects none"),
)
CLIENT_ID = Param("X-Client-Id", {"type": "string"},
                  "recorded in the audit list (else the remote address)")
_UNAVAILABLE = (503,)

_DISK_FULL = {507: "DISK_FULL: the store's disk is over its limit; nothing was written (the "
                   "store's answer passed through; the client keeps the message and retries "
                   "it later)"}

ROUTES = [
    Route("GET", "/v1/groups", "listGroups", "Consumer groups with retry settings",
          [Answer(200, "names", GroupNames)], errors=_UNAVAILABLE),
    Route("PUT", "/v1/groups/{group}", "putGroup",
          "Create or update a group's retry settings ({} -> defaults: retryQueueNums 1, "
          "retryMaxTimes 16)",
          [Answer(201, "created", GroupSettingsAnswer),
           Answer(200, "updated", GroupSettingsAnswer)],
          request=GroupSettingsPatch, request_required=False, errors=_UNAVAILABLE),
    Route("GET", "/v1/groups/{group}", "getGroup", "A group's retry settings",
          [Answer(200, "settings", GroupSettingsAnswer)], errors=_UNAVAILABLE),
    Route("POST", "/v1/groups/{group}/send-back", "sendBack",
          "Return a failed message (SPEC R1-R8). Checks in order: group exists (404 "
          "SUBSCRIPTION_GROUP_NOT_EXIST), store writable (403 NO_PERMISSION), retryQueueNums 0 "
          "(200 DROPPED), retry topic created (R3), message exists (404 SYSTEM_ERROR naming "
          "the offset or msgId)",
          [Answer(200, "outcome", SendBackAnswer)], request=SendBackRequest,
          errors=(403, 502, 503, 507), error_text=_DISK_FULL),
    Route("POST", "/v1/groups/{group}/send-back/batch", "sendBackBatch",
          "Several send-backs of one group, one store write; per-item results (an item's "
          "malformed body or unknown message is its own error)",
          [Answer(200, "results in order", SendBackResults)], request=SendBackItems,
          errors=(403, 502, 503, 507), error_text=_DISK_FULL),
    Route("GET", "/v1/groups/{group}/dlq", "listDlq",
          "Dead letters not resent or purged, paged by DLQ queue offset, filtered",
          [Answer(200, "a page", DlqPage)],
          query=(Param("offset", _MS, "DLQ queue offset to start at"),
                 Param("max", {"type": "integer", "minimum": 1, "maximum": LIST_MAX,
                               "default": LIST_MAX_DEFAULT}, "page size"),
                 Param("shard", {"type": "integer", "minimum": 0, "maximum": MAX_SHARD},
                       "more than one store shard: the shard to start at (a page's nextShard; "
                       "default the first), offset being that shard's DLQ queue offset"),
                 *FILTER_QUERY), errors=_UNAVAILABLE),
    Route("DELETE", "/v1/groups/{group}/dlq", "purgeDlq",
          "Purge all dead letters, or those the query selects (filter fields or repeated "
          "msgId)", [Answer(200, "count", PurgeResult)],
          query=(Param("msgId", {"type": "array", "items": _MSG_ID}), *FILTER_QUERY),
          headers=(CLIENT_ID,), errors=_UNAVAILABLE),
    Route("GET", "/v1/groups/{group}/dlq/{msgId}", "showDlq",
          "One dead letter with body and attempt history",
          [Answer(200, "message", DlqMessage)], errors=_UNAVAILABLE),
    Route("POST", "/v1/groups/{group}/dlq/resend", "resendDlq",
          "Resend msgIds / a filter / all into the group's retry topic at a level (default: only "
          "this group receives them again), or to the original topic (target origin: every "
          "group subscribed to it); reconsumeTimes restarts at 0 and the resend is appended "
          "to each message's RESEND_HISTORY. msgIds not in the DLQ: 404 NOT_IN_DLQ, nothing "
          "changed", [Answer(200, "count", ResendResult)], request=DlqResend,
          headers=(CLIENT_ID,), errors=(403, 409, 503, 507),
          error_text={**_DISK_FULL,
                      409: "NO_RETRY_TOPIC: target retry, and the group has retryQueueNums 0 "
                           "(R2)"}),
    Route("POST", "/v1/groups/{group}/dlq/purge", "purgeDlqSelected",
          "Purge msgIds / a filter / all (body form of DELETE .../dlq)",
          [Answer(200, "count", PurgeResult)], request=DlqPurge, headers=(CLIENT_ID,),
          errors=_UNAVAILABLE),
    Route("GET", "/v1/groups/{group}/dlq/audit", "dlqAudit",
          "Every resend and purge of the group (oldest first, the newest `max`)",
          [Answer(200, "records", DlqAudit)],
          query=(Param("max", {"type": "integer", "minimum": 1, "maximum": AUDIT_MAX,
                               "default": AUDIT_MAX_DEFAULT}, "records"),),
          errors=_UNAVAILABLE),
    *ops_routes(
        Route("GET", "/healthz", "healthz", "200 when Redis answers; reports the store too",
              [Answer(200, "ok", RetryHealth), Answer(503, "Redis down", RetryHealth)]),
        "Prometheus: clepsydra_retry_send_backs_total{group,outcome}, "
        "clepsydra_retry_dlq_depth{group}, clepsydra_retry_request_seconds"),
]

API = Api(
    title="Clepsydra retry service", version="1.0.0",
    description="Send-back, retry ladder, dead letters and the DLQ toolkit (SPEC R1-R10, R16). "
                "Errors are {error, message}. A method a path does not list is 405 "
                "METHOD_NOT_ALLOWED with an Allow header. Generated from "
                "clepsydra_retry.contract (make openapi).",
    routes=ROUTES, path_params=PATH_PARAMS,
    wire_requests=(DlqFilter, SendBackRequest), wire_answers=(SendBackAnswer,))
