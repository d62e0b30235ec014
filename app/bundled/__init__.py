"""Top-level data folders (migrations, static, graphql, examples) mapped in here when a wheel is built.

In a source checkout this package is empty and app.infra.resources falls back to the folders themselves.
"""
