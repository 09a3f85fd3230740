"""clepsydra_client: the Python SDK of Clepsydra (producer, push and pull consumers with
rebalance, admin client) and the ``clepsydra`` command.

    from clepsydra_client import Producer, PushConsumer, ConsumeResult
"""

from clepsydra_client.admin import AdminClient
from clepsydra_client.consumer.listener import (
    ConcurrentContext,
    ConsumeFromWhere,
    ConsumeResult,
    MessageModel,
    OrderlyContext,
    OrderlyResult,
)
from clepsydra_client.consumer.pull_consumer import PullConsumer, PullResult, PullStatus
from clepsydra_client.consumer.push import PushConsumer, PushSettings
from clepsydra_client.consumer.rebalance import (
    AverageByCircleStrategy,
    AverageStrategy,
    ConfigStrategy,
    ConsistentHashStrategy,
    MachineRoomStrategy,
)
from clepsydra_client.message import Attempt, Message, MessageQueue, SendResult
from clepsydra_client.producer import OutgoingMessage, Producer
from clepsydra_client.settings import ClientSettings
from clepsydra_core.wire.dlq import DlqFilter  # defined once, with the wire types

__all__ = [
    "AdminClient", "Attempt", "AverageByCircleStrategy", "AverageStrategy", "ClientSettings",
    "ConcurrentContext", "ConfigStrategy", "ConsistentHashStrategy", "ConsumeFromWhere",
    "ConsumeResult", "DlqFilter", "MachineRoomStrategy", "Message", "MessageModel",
    "MessageQueue", "OrderlyContext", "OrderlyResult", "OutgoingMessage", "Producer",
    "PullConsumer", "PullResult", "PullStatus", "PushConsumer", "PushSettings", "SendResult",
]

__version__ = "0.1.0"
