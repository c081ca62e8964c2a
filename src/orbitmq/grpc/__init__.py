"""The RocketMQ 5 gRPC endpoint (apache.rocketmq.v2.MessagingService) of a broker.

Modules take the broker's context (orbitmq.broker.context.BrokerContext) and the services it
needs, never the controller. ``grpc`` and ``google.protobuf`` are imported here and nowhere else
(import-linter). The message and service classes are generated into ``_generated`` by
scripts/regen_grpc.py; docs/rocketmq5.md says what is supported.
"""
