"""``relay.nn``: neural-network operator builders (conv, dense, pooling, normalisation, ...)."""

from kiln.op.conv import *
from kiln.op.deformable_conv import *
from kiln.op.nn import *
from kiln.op.nn_correlation import *
from kiln.op.nn_pack import *
from kiln.op.nn_winograd import *
from kiln.op.pool import *
