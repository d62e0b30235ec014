"""Evidence read from logs: log sources and offsets, checkpoints, anomalies."""
