"""Reading job log files from where we left off (I/O, no database)."""
