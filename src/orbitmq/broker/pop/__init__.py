"""POP consumption: receive, invisible time, ack by receipt handle (pop_service.py)."""
