#!/usr/bin/env bash
# Placeholder: the venv for the official RocketMQ C++ client used by tests/compat is prepared here.
exit 0
