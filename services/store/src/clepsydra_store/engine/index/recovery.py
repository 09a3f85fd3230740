"""Recovery at open (SPEC P3): the indexes re-derived from the CommitLog.

From the checkpoint (the CommitLog offset the indexes were flushed up to, each level's
handed-over mark, each queue's range) the CommitLog's tail is walked again: each record's entry
code and mark read back (``Dispatcher.redispatch``) and placed by the same
``Dispatcher.dispatch`` as live appends and carry-forward; a torn record is truncated. From
further back when the checkpoint cannot be trusted (a ConsumeQueue lost files: from the first
segment) or the key index found damaged files (``KeyIndex.rebuild_from``). Entries and key
index entries past the recovered end are removed, and files wholly below the first segment.
A checkpoint past the recovered end (a machine crash lost bytes it counted as flushed) has its
marks re-derived from the copies really present (D9).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from pathlib import Path

from clepsydra_core import naming
from clepsydra_store.engine.index.dispatcher import Dispatcher
from clepsydra_store.engine.log.checkpoint import Checkpoint
from clepsydra_store.engine.log.commitlog import CommitLog
from clepsydra_store.engine.meta.topics import TopicConfig

logger = logging.getLogger(__name__)


def recover(commitlog: CommitLog, dispatcher: Dispatcher, topics: Iterable[TopicConfig],
            consumequeue_dir: Path, checkpoint_path: Path) -> int:
    """Open the ConsumeQueues of the known ``topics``, walk the CommitLog from where the
    indexes can be trusted and re-dispatch it; returns the recovered CommitLog end."""
    cl, disp = commitlog, dispatcher
    configs = list(topics)
    known = {cfg.name for cfg in configs} | {naming.SCHEDULE_TOPIC, naming.TIMER_TOPIC}
    disp.replay_known = known
    disp.replay_since = {cfg.name: cfg.since for cfg in configs if cfg.since}
    for topic in sorted(known):
        topic_dir = consumequeue_dir / topic
        if topic_dir.is_dir():
            for entry in topic_dir.iterdir():
                if entry.name.isdigit():
                    disp.queue(topic, int(entry.name))
    disp.key_index.load(cl.max_offset)
    ckpt = Checkpoint.load(checkpoint_path)
    missing = ckpt is not None and _queues_missing(disp, ckpt, known)
    trusted = ckpt is not None and not missing
    start = max(ckpt.commitlog_offset, cl.min_offset) if ckpt and trusted else cl.min_offset
    if ckpt is not None and trusted:
        disp.handed_over = dict(ckpt.handed_over)
    rebuild = disp.key_index.rebuild_from
    if rebuild is not None and rebuild < start:  # key index files damaged or missing
        start = max(rebuild, cl.min_offset)
    logger.info("store recovery commitlog=%s checkpoint_offset=%s redispatch_from=%d "
                "rebuild=%s key_index_rebuild_from=%s", cl.directory,
                ckpt and ckpt.commitlog_offset, start, missing, rebuild)
    trusted_to = ckpt.commitlog_offset if ckpt and trusted and start == ckpt.commitlog_offset \
        else None  # DEC-recovery-from-checkpoint: no walk of the records it covers
    end = cl.recover(start, start, disp.redispatch, trusted_to=trusted_to)
    if ckpt is not None and end < ckpt.commitlog_offset:
        _rederive_marks(cl, disp, ckpt, end, dispatched=not trusted)
    elif ckpt is not None and not trusted:
        for level, mark in ckpt.handed_over.items():
            disp.raise_mark(level, mark)
    disp.finish_replay()
    disp.key_index.truncate_from(end)
    disp.key_index.drop_below(cl.min_offset)  # segments gone before the index files went
    for cq in list(disp.queues.values()):
        cq.truncate_from(end)
        cq.reset_min()
        cq.drop_below(cl.min_offset)
    logger.info("store recovered commitlog=%s commitlog_min_offset=%d commitlog_max_offset=%d "
                "queues=%d", cl.directory, cl.min_offset, end, len(disp.queues))
    return end


def _rederive_marks(cl: CommitLog, disp: Dispatcher, ckpt: Checkpoint, end: int, *,
                    dispatched: bool) -> None:
    """The checkpoint is past the recovered end (a machine crash lost CommitLog bytes it had
    counted as flushed): its handed-over marks may name hand-over copies that are gone. Each
    level's mark is taken from the copies really present instead (their ``SCHEDULE_OFFSET``),
    so entries whose copies were lost are handed over again (SPEC D9, P3): the records from the
    first segment on are dispatched again, unless the recovery walk did that already
    (``dispatched``)."""
    logger.warning("checkpoint past the recovered commitlog end checkpoint_offset=%d "
                   "end_offset=%d: handed-over marks re-derived from the log",
                   ckpt.commitlog_offset, end)
    disp.finish_replay()  # the marks of the records walked so far
    if not dispatched:
        disp.handed_over = {}
        disp.states.clear()
        cl.replay(cl.min_offset, disp.redispatch)
        disp.finish_replay()
    for level, mark in sorted(ckpt.handed_over.items()):
        if disp.mark(level) < mark:
            logger.warning("handed-over mark stepped back level=%d checkpoint=%d log=%d",
                           level, mark, disp.mark(level))


def _queues_missing(disp: Dispatcher, ckpt: Checkpoint, known: set[str]) -> bool:
    """A ConsumeQueue holds fewer entries than the checkpoint says it had (files lost)."""
    for topic, queues in ckpt.queues.items():
        if topic not in known:
            continue
        for queue_id, (low, high) in queues.items():
            cq = disp.existing_queue(topic, queue_id)
            have_low, have_high = (cq.min_offset, cq.max_offset) if cq else (0, 0)
            if have_high < high or (high > low and (cq is None or have_low > low)):
                logger.warning("consume queue missing entries topic=%s queue_id=%d "
                               "checkpoint=[%d,%d) files=[%d,%d); rebuilding from the "
                               "first commitlog segment", topic, queue_id, low, high,
                               have_low, have_high)
                return True
    return False
