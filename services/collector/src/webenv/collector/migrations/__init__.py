"""Versioned schema migrations (NNN_name.sql), applied in order and recorded in schema_migrations."""
