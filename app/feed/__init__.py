"""The change feed: an append-only table that subscriptions and live pages follow."""
