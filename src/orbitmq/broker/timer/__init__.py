"""Timer messages with any delivery time: a time wheel and a log (timer_service.py)."""
