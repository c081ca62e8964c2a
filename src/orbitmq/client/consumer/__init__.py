"""The consuming side of the SDK: push and pull consumers, the pull codec, rebalancing, process
queues, offset stores and consume services. Import the public names from :mod:`orbitmq.client`."""
