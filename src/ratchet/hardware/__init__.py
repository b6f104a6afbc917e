"""What the device is and what it can do: detection, spec sheets, measured ceilings."""
