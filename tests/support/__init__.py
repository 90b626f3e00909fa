"""Helpers shared by the tests: servers they start and stop themselves."""
