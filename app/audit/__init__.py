"""Audit events: the history every component writes and people read."""
