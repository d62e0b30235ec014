"""What a job asks for and what it is allowed: its policy, its mode, its batch script."""
