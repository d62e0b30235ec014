"""Database leases that keep one active worker (controller) per cluster."""
