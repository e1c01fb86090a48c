"""The fleet's coordination in the database (docs/fleet.md): hosts and their leases, one
incomplete operation per computer, singleton jobs, placement. PostgreSQL for many hosts; on
SQLite (one host, one process) the same calls work as the trivial case."""
