"""Tests of connectors/mqtt."""
