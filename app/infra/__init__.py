"""The service's own machinery: settings, database, SQL helpers, its logs and metrics, migrations."""
