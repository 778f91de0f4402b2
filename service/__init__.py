"""Kameleon's HTTP service: the ask/tell protocol over FastAPI, on a memory or Redis store."""

__version__ = "0.1.0"
