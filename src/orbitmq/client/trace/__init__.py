"""Message trace: the records a traced producer or push consumer writes to the trace topic, the
dispatcher that writes them in batches, and reading one message's journey back. Import the
public names from :mod:`orbitmq.client`."""
