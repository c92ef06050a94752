"""Recipe settings of the algorithmic task (torch-free: `seqxduce plugins` reads them)."""

from __future__ import annotations

from dataclasses import dataclass

from seqxduce.api import Settings, Task, UserError, setting

from .generate import Generator


@dataclass
class AlgorithmicSettings(Settings):
    kind: str = setting("reverse", help="copy, reverse or addition (the Universal Transformer's tasks)",
                        choices=("copy", "reverse", "addition"))
    symbols: int = setting(10, help="distinct symbols 0-9a-zA-Z (2..62); for addition the number base",
                           min=2, max=62)
    train_min_len: int = setting(1, help="shortest training source in tokens (addition 'a + b': 3 or more; "
                                         "paired: 1)", min=1)
    train_max_len: int = setting(40, help="longest training source, in tokens (paper: 40)", min=1)
    valid_min_len: int = setting(1, help="shortest validation source, in tokens", min=1)
    valid_max_len: int = setting(40, help="longest validation source, in tokens", min=1)
    test_min_len: int = setting(1, help="shortest test source, in tokens", min=1)
    test_max_len: int = setting(400, help="longest test source in tokens (paper: 400, beyond training)", min=1)
    train_size: int = setting(20000, help="examples in the train split", min=0)
    valid_size: int = setting(500, help="examples in the valid split", min=0)
    test_size: int = setting(500, help="examples in the test split", min=0)
    seed: int = setting(1234, help="data seed; each split draws from its own seed derived from this one")
    lsb_first: bool = setting(False, help="addition: least-significant digit first (as tensor2tensor)",
                              read_when={"kind": ("addition",)}, instead='only kind = "addition" has digits')
    operands: str = setting("separate", help="addition: separate = 'a + b' (tensor2tensor, the paper); "
                                             "paired = one token per digit position holding that digit of a "
                                             "and of b ('37': 3 and 7), the shorter number zero-padded, so the "
                                             "digits to add share a position (a length counts pairs; not the "
                                             "paper's task)",
                            choices=("separate", "paired"), read_when={"kind": ("addition",)},
                            instead='only kind = "addition" has operands')

    def validate(self) -> None:
        """Each split's longest source must hold its shortest one and the shortest source of the kind."""
        shortest = Generator(self.kind, self.symbols, operands=self.operands).min_length
        for split in Task.splits:
            low, high = self.lengths(split)
            if high < max(low, shortest):
                raise UserError(f"[task] {split}_max_len = {high} is below {split}_min_len = {low} or the "
                                f"shortest {self.kind} source ({shortest} tokens); raise {split}_max_len")

    def lengths(self, split: str) -> tuple[int, int]:
        """The configured (min, max) source length of one split."""
        return getattr(self, f"{split}_min_len"), getattr(self, f"{split}_max_len")
