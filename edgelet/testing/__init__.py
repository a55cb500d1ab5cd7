"""Shared test helpers and fakes (FakeRuntime, image builders, cleanup of test leftovers)."""
