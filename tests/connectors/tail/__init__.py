"""Tests of connectors/tail."""
