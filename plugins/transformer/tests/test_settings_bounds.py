"""The Transformer's and the Universal Transformer's settings are checked when built in Python as a recipe's are."""

import pytest
from seqxduce_transformer.settings import TransformerSettings, UniversalSettings

from seqxduce.api import UserError, check_settings


@pytest.mark.parametrize("build, message", [
    (lambda: TransformerSettings(heads=0), r"^TransformerSettings\.heads = 0 is out of range; use a number >= 1$"),
    (lambda: UniversalSettings(act_epsilon=1.0),
     r"^UniversalSettings\.act_epsilon = 1\.0 is out of range; use a number in \(0, 1\)$"),
    (lambda: TransformerSettings(d_model=64, heads=3), r"^\[model\] heads = 3 does not divide d_model = 64"),
])
def test_model_settings_built_in_python_are_checked(build, message):
    with pytest.raises(UserError, match=message):
        build()


def test_a_value_changed_after_construction_is_caught():
    settings = TransformerSettings()
    settings.dropout = 1.0
    with pytest.raises(UserError, match=r"^TransformerSettings\.dropout = 1\.0 is out of range"):
        check_settings(settings)
