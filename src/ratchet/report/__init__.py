"""Human-facing output: console tables now, HTML reports later."""
