"""Look-ups through the key index: every stored copy of a message by its msgId (or one copy's
offsetMsgId; docs/semantics.md), a topic's messages by key, and a topic's messages with a key
grouped by msgId (the cancel and reschedule of T2 by key). The key index only narrows the
search: each record is read and kept when its ``KEYS`` or ``UNIQ_KEY`` really is the key (a
full-hash collision) and, by key, when its topic is the one asked. Any thread; no lock.
"""

from __future__ import annotations

from collections.abc import Iterator

from clepsydra_core import naming
from clepsydra_core import properties as P
from clepsydra_core.errors import MessageNotFound
from clepsydra_core.msgid import offset_msg_id
from clepsydra_core.records import CommitLogRecord
from clepsydra_store.engine.index.key_index import KeyIndex
from clepsydra_store.engine.log.commitlog import CommitLog

MAX_COPIES = 1000
"""A look-up by msgId returns at most this many copies (the newest)."""
MAX_MESSAGES_BY_KEY = 1000
"""Most messages one cancel or reschedule by key acts on."""

Copies = dict[str, list[CommitLogRecord]]
"""msgId -> the stored copies of that message."""


class Lookup:
    def __init__(self, commitlog: CommitLog, key_index: KeyIndex) -> None:
        self._commitlog = commitlog
        self._keys = key_index

    def by_msg_id(self, msg_id: str, max_count: int = MAX_COPIES) -> list[CommitLogRecord]:
        """Every stored copy of a message, oldest first: the records whose unique id
        (UNIQ_KEY) is ``msg_id``, in any topic - the parked copy, the delivered one, its
        retries, its dead letter, its resends - and, when ``msg_id`` is an offsetMsgId, the
        record stored there with every copy of its message. MessageNotFound when none."""
        read = self._commitlog.read_record
        found: dict[int, CommitLogRecord] = {}
        wanted = {msg_id, msg_id.upper()}
        located = offset_msg_id(msg_id)
        if located is not None:
            try:
                record: CommitLogRecord | None = read(located.commitlog_offset)
            except MessageNotFound:
                record = None
            if record is not None and record.offset_msg_id == msg_id.upper():
                found[record.commitlog_offset] = record
                wanted.add(record.msg_id)
        for uniq in wanted:
            for commitlog_offset in self._keys.newest(uniq):
                if len(found) >= max_count:
                    break
                if commitlog_offset in found:
                    continue
                try:
                    record = read(commitlog_offset)
                except MessageNotFound:
                    continue  # its segment was deleted (retention)
                if record.properties.get(P.UNIQ_KEY) == uniq:
                    found[commitlog_offset] = record
        if not found:
            raise MessageNotFound(f"no message with msgId {msg_id}")
        return [found[offset] for offset in sorted(found)]

    def tombstones(self, msg_id: str) -> Iterator[CommitLogRecord]:
        """The cancel tombstones of message ``msg_id`` (T2), newest first: the records of the
        timer topic's cancel queue whose ``ORIGIN_MESSAGE_ID`` is ``msg_id`` (the key index
        files them under it, :func:`~clepsydra_store.engine.index.key_index.record_keys`)."""
        for commitlog_offset in self._keys.newest(msg_id):
            try:
                record = self._commitlog.read_record(commitlog_offset)
            except MessageNotFound:
                continue  # its segment was deleted (retention)
            if (record.topic == naming.TIMER_TOPIC
                    and record.queue_id == naming.TIMER_CANCEL_QUEUE
                    and record.properties.get(P.ORIGIN_MESSAGE_ID) == msg_id):
                yield record

    def by_key(self, topic: str, key: str, max_count: int, since: int) -> list[CommitLogRecord]:
        """Messages of ``topic`` (created at CommitLog offset ``since``) whose KEYS contain
        ``key`` or whose UNIQ_KEY is ``key``: the newest ``max_count``, oldest first."""
        found: list[CommitLogRecord] = []
        for commitlog_offset in self._keys.newest(key):
            if len(found) >= max_count or commitlog_offset < since:
                break
            try:
                record = self._commitlog.read_record(commitlog_offset)
            except MessageNotFound:
                continue
            if record.topic == topic and (key in record.keys
                                          or record.properties.get(P.UNIQ_KEY) == key):
                found.append(record)
        found.reverse()
        return found

    def copies_by_key(self, topic: str, key: str, since: int = 0) -> Copies:
        """msgId -> stored copies of the messages of ``topic`` (parked for it, or in it) whose
        KEYS hold ``key`` or whose UNIQ_KEY is ``key``; the newest MAX_MESSAGES_BY_KEY
        messages."""
        out: Copies = {}
        for commitlog_offset in reversed(self._keys.lookup(key)):
            if commitlog_offset < since:
                break
            try:
                record = self._commitlog.read_record(commitlog_offset)
            except MessageNotFound:
                continue
            props = record.properties
            if key not in record.keys and props.get(P.UNIQ_KEY) != key:
                continue
            if record.topic != topic and props.get(P.REAL_TOPIC) != topic:
                continue
            msg_id = props.get(P.UNIQ_KEY) or record.offset_msg_id
            if msg_id not in out and len(out) >= MAX_MESSAGES_BY_KEY:
                continue
            out.setdefault(msg_id, []).append(record)
        return out
