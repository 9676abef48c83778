"""``relay.transform``: the passes and the pass infrastructure."""

from kiln.transform import *
from kiln.transform import __all__
