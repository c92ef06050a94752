"""The fault tests' injection (tests.faults.slowed) in every torchrun worker started with this folder on PYTHONPATH
and $SEQXDUCE_TEST_SLOWED naming the stretch: for job scripts that run `torchrun -m seqxduce` as written (a real
SLURM's srun, whose command line the test cannot rewrite). Python imports sitecustomize at every start; the
launcher and every process not a torchrun worker are left alone."""

import os
import sys

if os.environ.get("SEQXDUCE_TEST_SLOWED") and "TORCHELASTIC_RUN_ID" in os.environ and "RANK" in os.environ:
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))))
    from tests.faults.slowed import apply

    apply(os.environ["SEQXDUCE_TEST_SLOWED"])
