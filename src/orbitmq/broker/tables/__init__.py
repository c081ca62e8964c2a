"""The broker's tables: topics, consumer offsets, subscription groups, clients and orderly
queue locks (each a ``*Manager``; the first three saved under ``STORE/config``)."""
