"""``relay.image``: image operator builders (resize)."""

from kiln.op.image import *
