"""What the exporter asks of the store, through its public HTTP API only: topics and their
queues, pulls (parsed with orjson, the hot path), the export group's offsets, every group's
offsets (for lag) and the schedule levels (for pending counts)."""

from __future__ import annotations

from typing import Any

import orjson
import requests

from clepsydra_client.http import HttpClient, error_from_response, segment
from clepsydra_client.topics import TopicInfo, list_topics
from clepsydra_core.errors import ClepsydraError, Unavailable


class StoreReader:
    def __init__(self, store_url: str, *, timeout_s: float = 30.0) -> None:
        self.http = HttpClient(store_url, timeout_s=timeout_s, service="store")
        self.base_url = store_url.rstrip("/")
        self.timeout_s = timeout_s
        self._session = requests.Session()
        self._session.trust_env = False

    def topics(self) -> list[TopicInfo]:
        return list_topics(self.http)

    def pull(self, topic: str, queue_id: int, queue_offset: int, max_count: int, *,
             with_body: bool) -> dict[str, Any]:
        """``{messages, nextOffset, minOffset, maxOffset}`` of one queue from ``queue_offset``."""
        url = (f"{self.base_url}/v1/topics/{segment(topic)}/queues/{queue_id}/messages")
        params = {"offset": queue_offset, "max": max_count,
                  "body": "true" if with_body else "false"}
        try:
            resp = self._session.get(url, params=params, timeout=self.timeout_s)
        except requests.RequestException as exc:
            raise Unavailable(f"the store at {self.base_url} did not answer "
                              f"({type(exc).__name__})") from exc
        try:
            payload = orjson.loads(resp.content) if resp.content else {}
        except orjson.JSONDecodeError:
            payload = None
        if resp.status_code >= 400:
            raise error_from_response(resp.status_code, payload, url)
        if not isinstance(payload, dict):
            raise Unavailable(f"GET {url} answered {resp.status_code} without a JSON object")
        return payload

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
        self._session.close()
        self.http.close()
