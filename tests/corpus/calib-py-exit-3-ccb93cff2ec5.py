import sys
def calibration_data():
    sys.exit(3)
