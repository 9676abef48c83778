"""``relay.dataflow_pattern``: the pattern language (:mod:`kiln.transform.dataflow_pattern`)."""

from kiln.transform.dataflow_pattern import *
from kiln.transform.dataflow_pattern import __all__
