"""The consumers' machinery: :class:`~clepsydra_client.consumer.push.PushConsumer` (pull loops,
process queues, the consume pool, rebalance, queue locks, send-back, offsets) and
:class:`~clepsydra_client.consumer.pull_consumer.PullConsumer`. Applications import the public
names from ``clepsydra_client``; nothing here imports :mod:`clepsydra_client.cli`."""
