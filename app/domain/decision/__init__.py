"""What to do about a failed attempt: root cause, retry rules, the Advice, the gate before any command."""
