"""Adapters and runtime shared by every service: settings, bus, logging, stores, encoders."""
