"""Tests of neostore."""
