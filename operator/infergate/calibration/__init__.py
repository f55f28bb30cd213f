"""Calibration of parity thresholds: how noisy an A/A pair is, and thresholds proposed from it.

`noise` measures (pure), `proposals` turns the worst noise into thresholds (pure), `report`
writes the document and its tables (pure), `measure` records the runs and compares the
pairs. The command is `infergate parity calibrate` (`infergate.commands.calibrate`).
"""
