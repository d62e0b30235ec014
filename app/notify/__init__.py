"""Notifications: a durable outbox written with the change it reports, delivered after commit (apprise)."""
