"""Real servers on loopback for the scale-out tests, each started and stopped by a fixture: PostgreSQL, a second
Docker engine with TLS, an S3 server. Each lives in its own short folder under /tmp, listens on a free port of
127.0.0.1 and is stopped by its own pidfile; none touches what it did not start."""
