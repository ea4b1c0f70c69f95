"""``simspec validate``: predict published measurements and report the error honestly."""
