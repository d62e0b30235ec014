"""`recovery lab`: a real single-machine Slurm cluster for development and integration tests."""
