"""The one exception bad input raises: a single line naming source, field, value and what is allowed."""


class SpecError(ValueError):
    """Invalid user input; `str(err)` is one line fit to show a user as is."""

    def __init__(self, source: str, field: str, value, allowed: str):
        self.source = source
        self.field = field
        self.value = value
        self.allowed = allowed
        shown = value if isinstance(value, str) else repr(value)
        where = f"{source}: " if source else ""
        super().__init__(f"{where}field '{field}' = {shown!s}: {allowed}")

    def __reduce__(self):
        """Rebuilt from its four parts, so that one raised in a worker process reaches the driver
        as itself (the default rebuilds from the message alone, and fails)."""
        return SpecError, (self.source, self.field, self.value, self.allowed)
