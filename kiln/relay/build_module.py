"""``relay.build_module``: the build entry points (``build``, ``optimize``, ``bind_params_by_name``)."""

from kiln.build_module import *  # noqa: F403
from kiln.build_module import __all__  # noqa: F401
from kiln.transform.bind_params import bind_params_by_name  # noqa: F401
