"""systemd integration: sd_notify and the watchdog."""
