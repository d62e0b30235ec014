"""The HTTP API: GraphQL (Strawberry) and the REST compatibility endpoints."""
