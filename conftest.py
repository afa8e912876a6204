"""Root conftest: the project's own tests drive pytest inside pytest (pytester)."""

pytest_plugins = ["pytester"]


def pytest_prefalign_register(registry):
    """The kept findings runs' reward method added after ``a9cc153``, registered as a plugin
    registers one: ``registry.BUILTINS`` is in every row's key, so adding it there would
    compute every carried row again (main lists it there)."""
    registry.add_reward(
        "profile_impostors", "prefalign_methods.rewards.profile_impostors:ProfileImpostors"
    )
