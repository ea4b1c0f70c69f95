"""What is built from many runs: sweeps, planning and recommendation, load policies, the
analytic batch-1 model, validation against published measurements, calibration fits."""
