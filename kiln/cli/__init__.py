"""Kiln's command line: ``kiln demo|compile|run|debug|inspect|calibrate|tune|records``."""
