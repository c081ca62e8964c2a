"""The producing side of the SDK: producers, auto-batching, the send codec, queue selectors
and transactional producers. Import the public names from :mod:`orbitmq.client`."""
