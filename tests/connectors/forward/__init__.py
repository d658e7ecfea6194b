"""Tests of connectors/forward."""
