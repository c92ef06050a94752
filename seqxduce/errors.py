"""The one exception type a user sees (torch-free; every core module and plugin may import it)."""


class UserError(Exception):
    """An error a user can fix: printed as one line, never as a traceback."""
