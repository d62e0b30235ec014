"""Goodput accounting: where the wall time of runs went (productive, and lost per failure), docs/goodput.md."""
