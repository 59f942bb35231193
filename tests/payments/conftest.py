"""The payment sandbox fixtures live in tests/conftest.py, shared with the agent tests."""
