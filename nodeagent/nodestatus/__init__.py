"""Node registration and status: setters (pure), the status manager, and the inspection file."""
