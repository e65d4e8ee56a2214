"""Wire schemas of ragbus: everything that travels on the bus, and nothing else.

This package imports nothing of ours, so any service (or any other NATS client
written in Python) can depend on it alone.
"""
