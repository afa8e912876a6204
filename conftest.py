"""Root conftest: the project's own tests drive pytest inside pytest (pytester)."""

pytest_plugins = ["pytester"]
