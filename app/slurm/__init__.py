"""Slurm access: the Scheduler interface, its CLI implementation, JSON parsers and an in-memory fake."""
