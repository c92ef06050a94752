"""`python -m seqxduce` (and `torchrun -m seqxduce`) runs the CLI."""

from seqxduce.cli import main

main()
