"""Tests of connectors/http."""
