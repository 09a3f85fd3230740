"""The ConsumeQueue on a folder of its own (CLEPSYDRA_STORE_CONSUMEQUEUE_DIR): on a cluster the
CommitLog and the ConsumeQueue are two volumes, so the store must write and recover each where
it is told."""

from __future__ import annotations

from pathlib import Path

from clepsydra_core import naming
from clepsydra_store.engine.message_store import MessageStore
from clepsydra_store.engine.types import PutRequest
from clepsydra_store.settings import StoreSettings
from tests.unit.store.conftest import engine_config


def test_consumequeue_dir_defaults_to_the_data_dir(tmp_path: Path) -> None:
    settings = StoreSettings.from_env({"CLEPSYDRA_HOME": str(tmp_path)})
    assert settings.engine.consumequeue_dir == tmp_path / "store" / naming.CONSUMEQUEUE_DIR


def test_consumequeue_dir_setting_is_read(tmp_path: Path) -> None:
    settings = StoreSettings.from_env({"CLEPSYDRA_HOME": str(tmp_path / "home"),
                                       "CLEPSYDRA_STORE_DIR": str(tmp_path / "commitlog-vol"),
                                       "CLEPSYDRA_STORE_CONSUMEQUEUE_DIR":
                                           str(tmp_path / "cq-vol")})
    assert settings.engine.data_dir == tmp_path / "commitlog-vol"
    assert settings.engine.consumequeue_dir == tmp_path / "cq-vol"


def test_queues_live_in_their_own_folder_and_are_recovered_from_it(tmp_path: Path) -> None:
    data_dir, cq_dir = tmp_path / "commitlog-vol", tmp_path / "cq-vol"
    store = MessageStore(engine_config(data_dir, consumequeue_dir=cq_dir))
    try:
        store.create_topic("T", 1)
        store.put_batch([PutRequest("T", b"m%d" % i) for i in range(3)])
        store.flush()
    finally:
        store.close()
    assert (cq_dir / "T" / "0" / naming.segment_file_name(0)).is_file()
    assert not (data_dir / naming.CONSUMEQUEUE_DIR).exists()
    assert (data_dir / naming.COMMITLOG_DIR).is_dir()

    reopened = MessageStore(engine_config(data_dir, consumequeue_dir=cq_dir))
    try:
        assert [m.body for m in reopened.read_queue("T", 0, 0, 10).messages] == \
            [b"m0", b"m1", b"m2"]
        reopened.put(PutRequest("T", b"m3"))
        assert [m.queue_offset for m in reopened.read_queue("T", 0, 3, 10).messages] == [3]
    finally:
        reopened.close()
