"""Advice (the durable decision about an attempt) and the scheduler actions that carry it out."""
