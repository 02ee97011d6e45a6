"""Post-training quantization (calibration, observers, rewrite). Not implemented yet."""
