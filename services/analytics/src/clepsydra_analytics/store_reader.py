"""What the exporter asks of the store, through its public HTTP API only: topics and their
queues, pulls (parsed with orjson, the hot path), the export group's offsets, every group's
offsets (for lag) and the schedule levels (for pending counts), through the one HTTP client
(clepsydra_core.runtime.http, orjson)."""

from __future__ import annotations

from typing import Any

from clepsydra_client.routing import Router
from clepsydra_client.topics import TopicInfo, list_topics
from clepsydra_core.errors import ClepsydraError
from clepsydra_core.runtime.http import HttpClient


class StoreReader:
    def __init__(self, store_url: str, *, timeout_s: float = 30.0) -> None:
        self.http = HttpClient(store_url, timeout_s=timeout_s, service="store",
                               env_proxies=False)
        self._router: Router | None = None

    def topics(self) -> list[TopicInfo]:
        """The topics of the store this reader reads (one shard's queues)."""
        return list_topics(self.http)

    def every_shard_topics(self) -> list[TopicInfo]:
        """The topics with their queues on every store shard (DEC-store-shards; the one
        store's with one shard)."""
        listed = self.topics()
        if self._router is None:
            self._router = Router(self.http)
        if not self._router.clustered:
            return listed
        return [self._router.topic(t.name) or t for t in listed]

    def pull(self, topic: str, queue_id: int, queue_offset: int, max_count: int, *,
             with_body: bool) -> dict[str, Any]:
        """``{messages, nextOffset, minOffset, maxOffset}`` of one queue from ``queue_offset``."""
        return self.http.get(self.http.path("/v1/topics/{}/queues/{}/messages", topic, queue_id),
                             {"offset": queue_offset, "max": max_count, "body": with_body})

    def committed(self, group: str, topic: str) -> dict[int, int]:
        raw = self.http.get(self.http.path("/v1/groups/{}/offsets", group), {"topic": topic})
        queues = (raw.get("offsets") or {}).get(topic) or {}
        return {int(q): int(o) for q, o in queues.items()}

    def commit(self, group: str, topic: str, queue_id: int, queue_offset: int) -> None:
        self.http.put(self.http.path("/v1/groups/{}/offsets", group),
                      {"topic": topic, "queueId": queue_id, "offset": queue_offset})

    def groups(self) -> list[str]:
        raw = self.http.get("/v1/groups")
        return [str(g["group"]) for g in raw.get("groups") or [] if isinstance(g, dict)]

    def group_offsets(self, group: str) -> dict[str, dict[int, int]]:
        raw = self.http.get(self.http.path("/v1/groups/{}/offsets", group))
        return {t: {int(q): int(o) for q, o in queues.items()}
                for t, queues in (raw.get("offsets") or {}).items()}

    def schedule_levels(self) -> list[dict[str, Any]]:
        try:
            raw = self.http.get("/v1/schedule/levels")
        except ClepsydraError:
            return []
        return [lv for lv in raw.get("levels") or [] if isinstance(lv, dict)]

    def close(self) -> None:
        if self._router is not None:
            self._router.close()
        self.http.close()
