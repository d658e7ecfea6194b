"""Tests of connectors/files."""
