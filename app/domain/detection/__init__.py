"""What a log says: crash signatures, progress, checkpoints, hangs, slowdowns, the nodes a line names."""
