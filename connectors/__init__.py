"""connectors: decode what arrives (Forward, HTTP, MQTT, files) into ingest batches."""
