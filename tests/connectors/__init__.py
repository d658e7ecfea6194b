"""Tests of connectors."""
