"""relay.quantize: qconfig is a configuration context; quantization itself raises clearly."""

from __future__ import annotations

import pytest

from kiln import relay
from kiln.errors import KilnError
from kiln.relay.quantize import QuantizeUnsupportedError, current_qconfig, qconfig, quantize
from kiln.relay.quantize._annotate import QAnnotateKind, attach_simulated_quantize


def test_qconfig_defaults_nesting_and_unknown_fields():
    assert current_qconfig().global_scale == 8.0
    with qconfig(global_scale=4.0, skip_conv_layers=None):
        assert current_qconfig().global_scale == 4.0
        with qconfig(nbit_input=16):
            assert current_qconfig().nbit_input == 16
            assert current_qconfig().global_scale == 8.0  # a new config starts from defaults
        assert current_qconfig().skip_conv_layers is None
    assert current_qconfig().skip_conv_layers == [0]
    with pytest.raises(QuantizeUnsupportedError, match="unknown field"):
        qconfig(not_a_field=1)


def test_quantize_and_simulated_quantize_raise_kiln_errors():
    x = relay.var("x", shape=(1, 3))
    with pytest.raises(KilnError, match="relay.quantize.quantize"):
        quantize(relay.Function([x], x))
    with pytest.raises(NotImplementedError, match="kind=INPUT"):
        attach_simulated_quantize(x, QAnnotateKind.INPUT)
    assert relay.quantize.qconfig is qconfig
