"""The admin client: :class:`~orbitmq.client.admin.client.client.AsyncAdmin` over a shared core
(:mod:`orbitmq.client.admin.client.core`) and one module per area (topics, groups, operations, users and
ACLs, dead letters, browsing). Import the public names from :mod:`orbitmq.client`."""
