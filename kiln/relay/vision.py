"""``relay.vision``: detection operator builders."""

from kiln.op.vision import *
