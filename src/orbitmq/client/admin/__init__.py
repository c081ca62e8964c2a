"""The admin client: :class:`~orbitmq.client.AsyncAdmin` over a shared core
(:mod:`orbitmq.client.admin.core`) and one module per area (topics, groups, queue reads,
operations, users and ACLs, dead letters, browsing). Import the public names from
:mod:`orbitmq.client`."""
