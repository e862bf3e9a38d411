-- The demo schema and the sweeper's login for docker-compose.yaml.
CREATE TABLE sessions (id bigint PRIMARY KEY, payload text, expires_at timestamptz);
CREATE INDEX ON sessions (expires_at);
CREATE ROLE ttl_sweeper LOGIN PASSWORD 'sweeper-secret';
GRANT SELECT, UPDATE, DELETE ON sessions TO ttl_sweeper;
