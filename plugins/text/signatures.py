"""Unknown-word signatures: a rare or unseen word is read as its class, e.g. <unk-ing> or <unk-Cap-s>.

The classes are those of the Berkeley parser's unknown-word model (Petrov et al. 2006, `getSignature`, level 4,
simplified): capitalization (with sentence-initial position apart), digits, dashes, and an English suffix.
A word model learns one embedding per class from the rare words of the training text, so an unseen
"-ing" word is read as a likely verb form instead of as the single <unk>.
"""

from __future__ import annotations

# checked in order: longer suffixes first where one ends another (-ity before -y)
SUFFIXES = ("ing", "ion", "ity", "ed", "er", "est", "ly", "al", "y")


def signature(word: str, first: bool = False) -> str:
    """The unknown-word class of word; first: it starts the text (a capital there says less)."""
    parts = ["<unk"]
    has_lower = any(c.islower() for c in word)
    if word[:1].isupper():
        parts.append("-INITC" if first else ("-CAPS" if not has_lower else "-Cap"))
    elif has_lower:
        parts.append("-lc")
    if any(c.isdigit() for c in word):
        parts.append("-NUM")
    if "-" in word:
        parts.append("-DASH")
    lower = word.lower()
    if len(word) >= 3 and has_lower:
        suffix = next((s for s in SUFFIXES if lower.endswith(s)), None)
        if suffix is None and lower.endswith("s") and not lower.endswith(("ss", "us", "is")):
            suffix = "s"
        if suffix:
            parts.append("-" + suffix)
    return "".join(parts) + ">"
