"""Tests of arrays."""
