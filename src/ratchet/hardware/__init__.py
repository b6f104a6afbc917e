"""What the device is and what it can do: detection, datasheet sheets, the ceilings the judge measured
(copy bandwidth, matrix rate, launch floor) and a read-only audit of clocks and settings."""
