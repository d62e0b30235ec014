"""Pushed job logs: the Loki push API and OTLP/HTTP logs decoded, mapped to attempts and recorded as file lines are."""
