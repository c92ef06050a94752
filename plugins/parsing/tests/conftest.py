"""The fixtures these tests use, from the core's public test helpers (so the plugin can be lifted with them)."""

from seqxduce.testing import evalb_reference, ptb_sample, shared_dir  # noqa: F401
