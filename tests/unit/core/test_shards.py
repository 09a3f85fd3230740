"""The cluster's shape and the shard in the ids (DEC-store-shards, DEC-shard-in-msgid,
DEC-shard-keys): what the store's settings, the local stack and every client read."""

from __future__ import annotations

import pytest

from clepsydra_core import naming
from clepsydra_core.errors import ConfigError
from clepsydra_core.msgid import (
    MsgId,
    decode_msg_id,
    encode_msg_id,
    offset_msg_id,
    pack_host,
    shard_of_host,
    shard_of_offset_msg_id,
    unpack_host,
)
from clepsydra_core.shards import (
    ClusterShape,
    parse_shard_id,
    peer_urls,
    shard_count,
    shard_port,
)


def test_shard_zero_ids_are_those_of_a_one_store_stack() -> None:  # DEC-shard-in-msgid
    assert pack_host("10.1.2.3:8081", 0) == pack_host("10.1.2.3:8081")
    assert encode_msg_id(pack_host("10.1.2.3:8081"), 4096) == "0A01020300001F910000000000001000"
    assert shard_of_offset_msg_id("0A01020300001F910000000000001000") == 0


def test_an_offset_msg_id_names_its_shard_and_keeps_its_host_and_offset() -> None:
    for shard in (1, 2, 77, 0xFFFF):
        host = pack_host("10.1.2.3:8081", shard)
        assert shard_of_host(host) == shard
        assert unpack_host(host) == "10.1.2.3:8081"  # storeHost in views: no shard bits
        msg_id = encode_msg_id(host, 123_456_789)
        assert decode_msg_id(msg_id) == MsgId("10.1.2.3", 8081, 123_456_789, shard)
        assert offset_msg_id(msg_id) == decode_msg_id(msg_id)
        assert shard_of_offset_msg_id(msg_id) == shard
        assert shard_of_offset_msg_id(msg_id.lower()) == shard


def test_a_host_that_does_not_parse_still_carries_its_shard() -> None:
    assert shard_of_host(pack_host("not-a-host", 5)) == 5
    assert unpack_host(pack_host("not-a-host", 5)) == "0.0.0.0:0"


def test_a_unique_msg_id_names_no_shard() -> None:
    assert shard_of_offset_msg_id("orders-42") is None
    assert shard_of_offset_msg_id("AC1100020A2B0193A0F1B2C3000000010") is None  # 33 digits


def test_a_shard_id_beyond_the_id_field_is_refused() -> None:
    with pytest.raises(ValueError, match=r"0\.\.65535"):
        pack_host("10.0.0.1:80", 0x10000)


def test_shard_zero_keeps_its_redis_keys_the_others_carry_their_shard() -> None:  # DEC-shard-keys
    assert naming.delay_offset_key(3) == naming.delay_offset_key(3, 0) == \
        "clepsydra:schedule:offset:3"
    assert naming.delay_lease_key(3, 0) == "clepsydra:schedule:lease:3"
    assert naming.delay_stats_key(3, 0) == "clepsydra:schedule:stats:3"
    assert naming.timer_lease_key(0) == naming.TIMER_LEASE_KEY
    assert naming.dlq_state_key("g", 0) == "clepsydra:dlq:g:state"
    keys = {naming.delay_offset_key(3, s) for s in range(3)} | {
        naming.delay_lease_key(3, s) for s in range(3)} | {
        naming.timer_lease_key(s) for s in range(3)} | {
        naming.dlq_state_key("g", s) for s in range(3)}
    assert len(keys) == 12  # no two shards share a key
    assert naming.delay_lease_key(3, 2) == "clepsydra:schedule:shard:2:lease:3"


def test_shard_folders_and_export_files_name_their_shard() -> None:
    assert naming.store_dir_name(0) == "store"
    assert naming.store_dir_name(2) == "store-2"
    name = naming.export_file_name(3, 100, 200, shard=2)
    assert name.startswith("s0002-q0003-")
    assert naming.parse_export_file(name) == (2, 3, 100, 200)
    assert naming.parse_export_file_name(name) == (3, 100, 200)
    assert naming.export_file_name(3, 100, 200) == naming.export_file_name(3, 100, 200, 0)
    assert naming.parse_export_file(naming.export_file_name(3, 100, 200)) == (0, 3, 100, 200)
    assert naming.parse_export_file(".tmp-x-" + name) is None


def test_the_ports_rule_keeps_shards_clear_of_the_other_services() -> None:
    ports = [shard_port(8081, i) for i in range(4)]
    assert ports == [8081, 8181, 8281, 8381]
    assert not set(ports) & {8082, 8083, 8084, 8085, 8086}
    assert shard_port(9081, 2, step=10) == 9101
    with pytest.raises(ConfigError, match="65535"):
        shard_port(65000, 20)


@pytest.mark.parametrize(("raw", "shard"), [("0", 0), ("2", 2), ("clepsydra-store-2", 2),
                                            ("store-10", 10)])
def test_a_shard_id_is_a_number_or_a_pod_name_ending_in_its_ordinal(raw: str,
                                                                     shard: int) -> None:
    assert parse_shard_id(raw, 11) == shard


@pytest.mark.parametrize("raw", ["", "clepsydra-store", "x-y", "3"])
def test_a_shard_id_that_is_neither_or_past_the_count_stops_the_store(raw: str) -> None:
    with pytest.raises(ConfigError, match="CLEPSYDRA_STORE_SHARD_ID"):
        parse_shard_id(raw, 3)


def test_peers_are_a_list_or_a_template_and_must_match_the_count() -> None:
    assert peer_urls("", 1, "http://me:8081/") == ("http://me:8081",)
    assert peer_urls("http://s-{id}.svc:8081", 3, "x") == (
        "http://s-0.svc:8081", "http://s-1.svc:8081", "http://s-2.svc:8081")
    assert peer_urls("http://a:1, http://b:2/", 2, "x") == ("http://a:1", "http://b:2")
    with pytest.raises(ConfigError, match="CLEPSYDRA_STORE_PEERS"):
        peer_urls("", 3, "x")
    with pytest.raises(ConfigError, match="asks for 3"):
        peer_urls("http://a:1,http://b:2", 3, "x")


def test_the_cluster_shape_from_the_environment() -> None:
    env = {"CLEPSYDRA_STORE_SHARDS": "3", "CLEPSYDRA_STORE_SHARD_ID": "clepsydra-store-1",
           "CLEPSYDRA_STORE_PEERS": "http://s-{id}:8081"}
    shape = ClusterShape.from_env(env, "http://ignored")
    assert (shape.shard_id, shape.shards, shape.clustered) == (1, 3, True)
    assert shape.others() == [0, 2] and shape.url_of(2) == "http://s-2:8081"
    one = ClusterShape.from_env({}, "http://127.0.0.1:8081")
    assert (one.shard_id, one.shards, one.clustered, one.others()) == (0, 1, False, [])
    assert shard_count({}) == 1
    with pytest.raises(ConfigError, match="CLEPSYDRA_STORE_SHARDS"):
        shard_count({"CLEPSYDRA_STORE_SHARDS": "0"})
