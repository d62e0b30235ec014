"""Recovery: keeps GPU training runs on Slurm alive."""

__version__ = "0.1.0"
