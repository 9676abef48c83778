"""``relay.build_module``: the build entry points (``build``, ``optimize``, ``bind_params_by_name``)."""

from kiln.build_module import *
from kiln.build_module import __all__
from kiln.transform.bind_params import bind_params_by_name
