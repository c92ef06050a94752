"""The exceptions a user sees (torch-free; every core module and plugin may import them)."""


class UserError(Exception):
    """An error a user can fix: printed as one line, never as a traceback."""


class TrainingStopped(UserError):
    """Training stopped because it was asked to (Ctrl-C, SIGTERM): not a failure. The message says what was
    saved and how to go on; a command exits with exit_code (128 + the signal's number, as a shell reports it)."""

    def __init__(self, message: str, exit_code: int = 130):
        super().__init__(message)
        self.exit_code = exit_code
