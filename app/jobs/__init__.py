"""Workflows, jobs, attempts and policies: ORM models and async services."""
