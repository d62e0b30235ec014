"""The server-rendered HTMX dashboard under /dashboard."""
