"""Lite topics (RocketMQ 5.5): service.py."""
